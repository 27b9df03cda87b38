package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/config"
)

const kafkaRoute = `
routes:
  - name: orders
    from: { kafka: { topic: orders.delay } }
    to:   { kafka: { topic: orders } }
`

// yamlAt nests value (YAML text) under the dotted key.
func yamlAt(key, value string) string {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	return b.String() + " " + value + "\n"
}

func envOf(key string) string {
	return config.EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// checkConfigWith runs check-config with the given file body, environment and --set flags.
func checkConfigWith(t *testing.T, body string, env []string, set ...string) (int, string, string) {
	t.Helper()
	environ = func() []string { return env }
	defer func() { environ = func() []string { return []string{} } }()
	args := []string{"check-config", "-c", writeConfig(t, body)}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return call(t, args...)
}

func assertNoSecret(t *testing.T, what, stdout, stderr string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(stdout, s) || strings.Contains(stderr, s) {
			t.Errorf("%s: secret %q printed:\nstdout:\n%s\nstderr:\n%s", what, s, stdout, stderr)
		}
	}
}

// Every secret key, from every source, valid or not: check-config never prints it.
func TestCheckConfigNeverPrintsSecrets(t *testing.T) {
	// master_name makes sentinel_password valid; the SASL mechanism makes the password used.
	const base = kafkaRoute + "redis: {master_name: mymaster}\nkafka: {sasl: {mechanism: PLAIN, username: u}}\n"
	for _, key := range config.SecretKeys() {
		secret := "Zq" + strings.NewReplacer(".", "", "_", "").Replace(key) + "Secret"
		// Valid, from the file, the environment and a flag: printed masked.
		for _, src := range []struct {
			name string
			body string
			env  []string
			set  []string
		}{
			{"file", kafkaRoute + mergeYAML(key, secret), nil, nil},
			{"env", base, []string{envOf(key) + "=" + secret}, nil},
			{"flag", base, nil, []string{key + "=" + secret}},
		} {
			code, out, errOut := checkConfigWith(t, src.body, src.env, src.set...)
			if code != exitOK {
				t.Fatalf("%s %s: exit %d\n%s", src.name, key, code, errOut)
			}
			assertNoSecret(t, src.name+" "+key, out, errOut, secret)
			leaf := key[strings.LastIndex(key, ".")+1:]
			if !strings.Contains(out, leaf+": '"+config.Mask+"'") {
				t.Errorf("%s %s: output does not show the key masked:\n%s", src.name, key, out)
			}
		}
		// Invalid: a number, a list, a section in the file; misplaced in env and flags.
		for _, v := range []struct{ yaml, secret string }{
			{"918273645546372", "918273645546372"},
			{"[" + secret + "A, " + secret + "B]", secret + "A"},
			{"{x: " + secret + "C}", secret + "C"},
		} {
			code, out, errOut := checkConfigWith(t, kafkaRoute+yamlAt(key, v.yaml), nil)
			if code != exitError || !strings.Contains(errOut, key+": want a string") {
				t.Errorf("%s = %s: exit %d, stderr:\n%s", key, v.yaml, code, errOut)
			}
			assertNoSecret(t, key+" = "+v.yaml, out, errOut, v.secret)
		}
		code, out, errOut := checkConfigWith(t, kafkaRoute, []string{envOf(key) + "__X=" + secret + "D"})
		if code != exitError {
			t.Errorf("env %s__X: exit %d", key, code)
		}
		assertNoSecret(t, "env "+key+"__X", out, errOut, secret+"D")
		code, out, errOut = checkConfigWith(t, kafkaRoute, nil, key+".x="+secret+"E", key+":"+secret+"F")
		if code != exitError {
			t.Errorf("flag %s.x: exit %d", key, code)
		}
		assertNoSecret(t, "flag "+key+".x", out, errOut, secret+"E", secret+"F")
	}
}

// mergeYAML renders base settings plus one secret key as a YAML file body.
func mergeYAML(key, secret string) string {
	m := map[string]string{
		"redis.password":          "redis: {master_name: mymaster, password: %s}\n",
		"redis.sentinel_password": "redis: {master_name: mymaster, sentinel_password: %s}\n",
		"kafka.sasl.password":     "kafka: {sasl: {mechanism: PLAIN, username: u, password: %s}}\n",
		"admin.token":             "admin: {token: %s}\n",
	}
	return fmt.Sprintf(m[key], secret)
}

// Credentials in URLs and addresses: an amqp.url without a scheme, a redis.addrs or
// kafka.brokers entry with userinfo are refused, naming the key, without the password.
func TestCheckConfigRefusesCredentialsInAddresses(t *testing.T) {
	const pw = "ZqAddrPassw0rd"
	for _, c := range []struct{ key, value, want string }{
		{"amqp.url", "guest:" + pw + "@rabbit:5672", "amqp.url: must start with amqp://"},
		{"amqp.url", "amqp://guest:" + pw + "@rabbit:bad", "amqp.url: is not a valid URL"},
		{"redis.addrs", "app:" + pw + "@redis:6379", "redis.addrs[0]: want host:port without credentials"},
		{"kafka.brokers", "app:" + pw + "@kafka:9092", "kafka.brokers[0]: want host:port without credentials"},
	} {
		for _, src := range []string{"file", "env", "flag"} {
			var body = kafkaRoute
			var env, set []string
			switch src {
			case "file":
				body += yamlAt(c.key, fmt.Sprintf("%q", c.value))
			case "env":
				env = []string{envOf(c.key) + "=" + c.value}
			case "flag":
				set = []string{c.key + "=" + c.value}
			}
			code, out, errOut := checkConfigWith(t, body, env, set...)
			if code != exitError || !strings.Contains(errOut, c.want) {
				t.Errorf("%s %s=%s: exit %d, stderr lacks %q:\n%s", src, c.key, c.value, code, c.want, errOut)
			}
			assertNoSecret(t, src+" "+c.key, out, errOut, pw)
		}
	}
	// A valid amqp.url is printed with its password masked.
	code, out, errOut := checkConfigWith(t, kafkaRoute, []string{"DELAYBRIDGE_AMQP__URL=amqp://app:" + pw + "@rabbit:5672/"})
	if code != exitOK || !strings.Contains(out, "url: amqp://app:*****@rabbit:5672/") {
		t.Errorf("valid amqp.url: exit %d\n%s%s", code, out, errOut)
	}
	assertNoSecret(t, "valid amqp.url", out, errOut, pw)
}

// bridge ctl reads admin.token from the file given with -c: a broken one is reported
// without the secret.
func TestCtlConfigErrorHidesToken(t *testing.T) {
	file := writeConfig(t, kafkaRoute+"admin: {listen: \"127.0.0.1:1\", token: [ZqCtlTok1, ZqCtlTok2]}\n")
	code, out, errOut := call(t, "ctl", "-c", file, "--timeout", "1s", "get", "x")
	if code == exitOK || !strings.Contains(errOut, "admin.token") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	assertNoSecret(t, "ctl -c", out, errOut, "ZqCtlTok1", "ZqCtlTok2")
}
