package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/config"
)

// These tests run the built binary's check-config and ctl with secrets in every place a
// configuration can carry them; TestConfigErrorsNeverPrintSecrets (input_test.go) does
// the same for broken secrets through check-config and run.

const secretsRoute = `routes:
  - name: orders
    from: { kafka: { topic: orders.delay } }
    to:   { kafka: { topic: orders } }
`

// runCLI runs the bridge binary with a configuration file body (written to a temp file
// and given with -c after args[0]), env added to a minimal environment, and the rest
// of args; it returns the exit code and output.
func runCLI(t *testing.T, body string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return runBinary(t, env, append([]string{args[0], "-c", file}, args[1:]...)...)
}

// runBinary runs the bridge binary with args and env added to a minimal environment,
// for at most a minute (a command of the CLI must end by itself; -1 if it did not),
// and returns the exit code and output. A data race reported fails the test.
func runBinary(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bridgeBin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Errorf("bridge %v: still running after a minute", args)
		code = -1
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("bridge %v: %v", args, err)
	}
	if strings.Contains(errOut.String(), raceMarker) {
		t.Errorf("bridge %v: data race reported:\n%s", args, errOut.String())
	}
	return code, out.String(), errOut.String()
}

// setFlags turns key=value pairs into --set flags.
func setFlags(kvs ...string) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, "--set", kv)
	}
	return out
}

func assertNoSecret(t *testing.T, what, stdout, stderr string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(stdout, s) || strings.Contains(stderr, s) {
			t.Errorf("%s: secret %q printed:\nstdout:\n%s\nstderr:\n%s", what, s, stdout, stderr)
		}
	}
}

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

// secretInFile renders the settings a secret key needs to be used plus the key itself.
func secretInFile(key, secret string) string {
	m := map[string]string{
		"redis.password":          "redis: {master_name: mymaster, password: %s}\n",
		"redis.sentinel_password": "redis: {master_name: mymaster, sentinel_password: %s}\n",
		"kafka.sasl.password":     "kafka: {sasl: {mechanism: PLAIN, username: u, password: %s}}\n",
		"admin.token":             "admin: {token: %s}\n",
	}
	return fmt.Sprintf(m[key], secret)
}

// TestCheckConfigMasksEverySecret: every secret key (config.SecretKeys), valid, from the
// file, the environment and --set, is printed masked by check-config; a wrong type (a
// number, a list, a section) exits 1 with "<key>: want a string"; a key misplaced under
// a secret in the environment or a flag exits 1; no secret is printed in any case.
func TestCheckConfigMasksEverySecret(t *testing.T) {
	t.Parallel() // runs the binary only, on its own temp files: see the package doc
	// master_name makes sentinel_password valid; the SASL mechanism makes the password used.
	const base = secretsRoute + "redis: {master_name: mymaster}\nkafka: {sasl: {mechanism: PLAIN, username: u}}\n"
	for _, key := range config.SecretKeys() {
		secret := "Zq" + strings.NewReplacer(".", "", "_", "").Replace(key) + "Secret"
		for _, src := range []struct {
			name string
			body string
			env  []string
			set  []string
		}{
			{"file", secretsRoute + secretInFile(key, secret), nil, nil},
			{"env", base, []string{envOf(key) + "=" + secret}, nil},
			{"flag", base, nil, []string{key + "=" + secret}},
		} {
			code, out, errOut := runCLI(t, src.body, src.env, append([]string{"check-config"}, setFlags(src.set...)...)...)
			if code != 0 {
				t.Fatalf("%s %s: exit %d\n%s", src.name, key, code, errOut)
			}
			assertNoSecret(t, src.name+" "+key, out, errOut, secret)
			leaf := key[strings.LastIndex(key, ".")+1:]
			if !strings.Contains(out, leaf+": '"+config.Mask+"'") {
				t.Errorf("%s %s: output does not show the key masked:\n%s", src.name, key, out)
			}
		}
		for _, v := range []struct{ yaml, secret string }{
			{"918273645546372", "918273645546372"},
			{"[" + secret + "A, " + secret + "B]", secret + "A"},
			{"{x: " + secret + "C}", secret + "C"},
		} {
			code, out, errOut := runCLI(t, secretsRoute+yamlAt(key, v.yaml), nil, "check-config")
			if code != 1 || !strings.Contains(errOut, key+": want a string") {
				t.Errorf("%s = %s: exit %d, stderr:\n%s", key, v.yaml, code, errOut)
			}
			assertNoSecret(t, key+" = "+v.yaml, out, errOut, v.secret)
		}
		code, out, errOut := runCLI(t, secretsRoute, []string{envOf(key) + "__X=" + secret + "D"}, "check-config")
		if code != 1 {
			t.Errorf("env %s__X: exit %d", key, code)
		}
		assertNoSecret(t, "env "+key+"__X", out, errOut, secret+"D")
		code, out, errOut = runCLI(t, secretsRoute, nil, append([]string{"check-config"}, setFlags(key+".x="+secret+"E", key+":"+secret+"F")...)...)
		if code != 1 {
			t.Errorf("flag %s.x: exit %d", key, code)
		}
		assertNoSecret(t, "flag "+key+".x", out, errOut, secret+"E", secret+"F")
	}
}

// TestCheckConfigRefusesCredentialsInAddresses: an amqp.url without a scheme or not a
// URL, a redis.addrs or kafka.brokers entry with userinfo, from each source, exits 1
// naming the key without the password; a valid amqp.url is printed with it masked.
func TestCheckConfigRefusesCredentialsInAddresses(t *testing.T) {
	t.Parallel() // runs the binary only, on its own temp files: see the package doc
	const pw = "ZqAddrPassw0rd"
	for _, c := range []struct{ key, value, want string }{
		{"amqp.url", "guest:" + pw + "@rabbit:5672", "amqp.url: must start with amqp://"},
		{"amqp.url", "amqp://guest:" + pw + "@rabbit:bad", "amqp.url: is not a valid URL"},
		{"redis.addrs", "app:" + pw + "@redis:6379", "redis.addrs[0]: want host:port without credentials"},
		{"kafka.brokers", "app:" + pw + "@kafka:9092", "kafka.brokers[0]: want host:port without credentials"},
	} {
		for _, src := range []string{"file", "env", "flag"} {
			body := secretsRoute
			var env, args []string
			switch src {
			case "file":
				body += yamlAt(c.key, fmt.Sprintf("%q", c.value))
			case "env":
				env = []string{envOf(c.key) + "=" + c.value}
			case "flag":
				args = setFlags(c.key + "=" + c.value)
			}
			code, out, errOut := runCLI(t, body, env, append([]string{"check-config"}, args...)...)
			if code != 1 || !strings.Contains(errOut, c.want) {
				t.Errorf("%s %s=%s: exit %d, stderr lacks %q:\n%s", src, c.key, c.value, code, c.want, errOut)
			}
			assertNoSecret(t, src+" "+c.key, out, errOut, pw)
		}
	}
	code, out, errOut := runCLI(t, secretsRoute, []string{"DELAYBRIDGE_AMQP__URL=amqp://app:" + pw + "@rabbit:5672/"}, "check-config")
	if code != 0 || !strings.Contains(out, "url: amqp://app:*****@rabbit:5672/") {
		t.Errorf("valid amqp.url: exit %d\n%s%s", code, out, errOut)
	}
	assertNoSecret(t, "valid amqp.url", out, errOut, pw)
}

// TestCtlConfigErrorHidesToken: bridge ctl reads admin.token from the file given with
// -c; a broken one is reported, naming the key, without the secret.
func TestCtlConfigErrorHidesToken(t *testing.T) {
	code, out, errOut := runCLI(t, secretsRoute+"admin: {listen: \"127.0.0.1:1\", token: [ZqCtlTok1, ZqCtlTok2]}\n", nil,
		"ctl", "--timeout", "1s", "get", "x")
	if code != 1 || !strings.Contains(errOut, "admin.token") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	assertNoSecret(t, "ctl -c", out, errOut, "ZqCtlTok1", "ZqCtlTok2")
}
