package config

import (
	"fmt"
	"strings"
	"testing"
)

// secretKeys are the keys whose value is a secret; SecretKeys must list exactly these.
var secretKeys = []string{"redis.password", "redis.sentinel_password", "kafka.sasl.password", "admin.token"}

// yamlAt nests value (YAML text) under the dotted key, e.g. kafka.sasl.password.
func yamlAt(key, value string) string {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString(" " + value + "\n")
	return b.String()
}

// envName turns a dotted key into its DELAYBRIDGE_ variable.
func envName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// noSecret fails when any of secrets appears in err's text.
func noSecret(t *testing.T, what string, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: want an error, got nil", what)
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%s: secret %q in the error:\n%v", what, s, err)
		}
	}
}

func TestSecretKeysListed(t *testing.T) {
	if fmt.Sprint(SecretKeys()) != fmt.Sprint(secretKeys) {
		t.Errorf("SecretKeys() = %v, want %v", SecretKeys(), secretKeys)
	}
}

// A secret given with the wrong type (a number, a list, a section) is refused without
// echoing it, from the file; misplaced secrets from the environment and flags neither.
func TestSecretsNotInTypeErrors(t *testing.T) {
	for _, key := range secretKeys {
		for _, v := range []struct{ yaml, secret string }{
			{"98765432101234", "98765432101234"},
			{"9876.54321", "9876.54321"},
			{"[ZqListAlpha1, ZqListBeta2]", "ZqListAlpha1"},
			{"{inner: ZqMapValue3}", "ZqMapValue3"},
			{"true", "true"},
		} {
			file := writeFile(t, yamlAt(key, v.yaml))
			_, err := load(t, file, nil, minimalRoute...)
			mustFieldError(t, err, key, "file "+file, "value not shown")
			if v.secret != "true" {
				noSecret(t, key+" = "+v.yaml, err, v.secret)
			}
		}
		// The section above a secret given as one value.
		parent := key[:strings.LastIndex(key, ".")]
		file := writeFile(t, yamlAt(parent, "ZqParentScalar4"))
		_, err := load(t, file, nil, minimalRoute...)
		noSecret(t, parent+" as a scalar", err, "ZqParentScalar4")

		// Environment and flags carry text, so a secret key always takes it; a secret
		// under a wrong path is refused without being echoed.
		_, err = load(t, "", []string{envName(key) + "__X=ZqEnvNested5"}, minimalRoute...)
		noSecret(t, "env "+key+"__X", err, "ZqEnvNested5")
		_, err = load(t, "", nil, append(minimalRoute, key+".0=ZqFlagNested6")...)
		noSecret(t, "flag "+key+".0", err, "ZqFlagNested6")
		_, err = load(t, "", nil, append(minimalRoute, parent+"=ZqFlagParent7")...)
		noSecret(t, "flag "+parent, err, "ZqFlagParent7")

		// A valid secret next to an unrelated problem: the problem is reported, the secret
		// not, from each source.
		for _, src := range []struct {
			name string
			file string
			env  []string
			set  []string
		}{
			{name: "file", file: writeFile(t, yamlAt(key, "ZqValidSecret8")+"shards: 0\n")},
			{name: "env", env: []string{envName(key) + "=ZqValidSecret8", "DELAYBRIDGE_SHARDS=0"}},
			{name: "flag", set: []string{key + "=ZqValidSecret8", "shards=0"}},
		} {
			_, err := load(t, src.file, src.env, append(append([]string{}, minimalRoute...), src.set...)...)
			mustFieldError(t, err, "shards", "", "between 1 and 16384")
			noSecret(t, src.name+" "+key+" beside another problem", err, "ZqValidSecret8")
		}
	}
}

// URLs and addresses that carry credentials: an amqp.url without a scheme or that does not
// parse, and a redis.addrs or kafka.brokers entry with userinfo, are refused with an
// error naming the key and never showing the password, from every source.
func TestCredentialsInURLsRefusedMasked(t *testing.T) {
	const pw = "ZqUrlPassw0rd"
	cases := []struct {
		key, listKey, value string
	}{
		{"amqp.url", "amqp.url", "guest:" + pw + "@rabbit:5672/"},
		{"amqp.url", "amqp.url", "amqp//guest:" + pw + "@rabbit:5672/"},
		{"amqp.url", "amqp.url", "amqp://guest:" + pw + "@rabbit:bad/"},
		{"amqp.url", "amqp.url", "amqp://guest:pa/" + pw + "@rabbit:5672/"},
		{"amqp.url", "amqp.url", "amqp://guest:" + pw},
		{"redis.addrs", "redis.addrs[0]", "user:" + pw + "@redis:6379"},
		{"redis.addrs", "redis.addrs[0]", ":" + pw + "@redis:6379"},
		{"redis.addrs", "redis.addrs[0]", "redis://:" + pw + "@redis:6379"},
		{"redis.addrs", "redis.addrs[0]", pw + "@redis"},
		{"kafka.brokers", "kafka.brokers[0]", "user:" + pw + "@kafka:9092"},
	}
	for _, c := range cases {
		t.Run(c.key+"="+strings.ReplaceAll(c.value, pw, "PW"), func(t *testing.T) {
			file := writeFile(t, yamlAt(c.key, fmt.Sprintf("%q", c.value)))
			_, err := load(t, file, nil, minimalRoute...)
			mustFieldError(t, err, c.listKey, "file "+file)
			noSecret(t, "file", err, pw)

			_, err = load(t, "", []string{envName(c.key) + "=" + c.value}, minimalRoute...)
			mustFieldError(t, err, c.listKey, "env "+envName(c.key))
			noSecret(t, "env", err, pw)

			_, err = load(t, "", nil, append(minimalRoute, c.key+"="+c.value)...)
			mustFieldError(t, err, c.listKey, "flag --set "+c.key)
			noSecret(t, "flag", err, pw)
		})
	}
	// A number where the URL goes is refused without echoing it.
	file := writeFile(t, yamlAt("amqp.url", "123456789012"))
	_, err := load(t, file, nil, minimalRoute...)
	mustFieldError(t, err, "amqp.url", "file "+file, "want a string")
	noSecret(t, "amqp.url number", err, "123456789012")
}

// YAML syntax errors can quote the text they choke on; the secrets in the file are masked.
func TestSecretsNotInParseErrors(t *testing.T) {
	for _, body := range []string{
		"admin:\n  token: !!int ZqParseTok1\n",
		"redis:\n  password: !!binary ZqParseTok1\n",
		"redis: {password: !!float ZqParseTok1}\n",
		"kafka:\n  sasl: {password: !!int ZqParseTok1, mechanism: PLAIN}\n",
		"amqp:\n  url: !!int amqp://u:ZqParseTok1@h/\n",
	} {
		_, err := load(t, writeFile(t, body), nil)
		noSecret(t, body, err, "ZqParseTok1")
		if err != nil && !strings.Contains(err.Error(), "file ") {
			t.Errorf("%q: the error does not name the file: %v", body, err)
		}
	}
	// The --set argument without "=" is not echoed when it may be a value.
	_, err := load(t, "", nil, append(minimalRoute, "admin.token:ZqNoEquals9")...)
	noSecret(t, "--set without =", err, "ZqNoEquals9")
}

func TestRedactedMasksCredentialsAnywhere(t *testing.T) {
	c := Default()
	c.AMQP.URL = "guest:ZqRedact1@rabbit:5672"
	c.Redis.Addrs = []string{"u:ZqRedact2@r:6379", "r2:6379"}
	c.Kafka.Brokers = []string{"u:ZqRedact3@k:9092"}
	r := Redacted(c)
	out, err := MarshalYAML(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ZqRedact1", "ZqRedact2", "ZqRedact3"} {
		if strings.Contains(string(out), s) {
			t.Errorf("%s in redacted output:\n%s", s, out)
		}
	}
	if r.Redis.Addrs[1] != "r2:6379" || c.Redis.Addrs[0] != "u:ZqRedact2@r:6379" {
		t.Errorf("addrs: redacted %v, original %v", r.Redis.Addrs, c.Redis.Addrs)
	}
}

// The backstop masks a collected secret wherever it stands apart in a message, but not
// inside a longer word, and ignores values too short to mask readably.
func TestScrub(t *testing.T) {
	s := secretSet{}
	s.add("pass")
	s.add("ab")
	s.addUserinfo("amqp://app:s%40cret@h:5672/")
	for msg, want := range map[string]string{
		`got "pass" (x)`:                   `got "` + Mask + `" (x)`,
		"the password is wrong":            "the password is wrong",
		"ab cd":                            "ab cd",
		"dial amqp://app:s%40cret@h: fail": "dial amqp://" + Mask + "@h: fail",
		"secret s@cret here":               "secret " + Mask + " here",
	} {
		if got := s.scrub(msg); got != want {
			t.Errorf("scrub(%q) = %q, want %q", msg, got, want)
		}
	}
}
