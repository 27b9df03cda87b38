package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Bad input through the built binary: x-deliver-at in unix seconds, and configurations
// carrying secrets that are wrong.

// TestKafkaDeliverAtUnixSecondsDeadLettered: a record whose x-deliver-at is unix
// seconds (10 digits; read as milliseconds it would be due in 1970, that is at once) is
// produced with franz-go to the delay topic. It ends dead with reason bad_deliver_at
// (GET /v1/messages/{id}, GET /v1/dead, messages_invalid_total{reason="bad_deliver_at"}
// 1) and never reaches the target, while a valid record produced right after it (same
// partition) is delivered.
func TestKafkaDeliverAtUnixSecondsDeadLettered(t *testing.T) {
	e := startKafkaEnv(t, "")
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kaddr), kgo.DefaultProduceTopic("orders.delay"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	secs := time.Now().Add(2 * time.Second).Unix()
	rec := func(id, header, value string) *kgo.Record {
		return &kgo.Record{Key: []byte("same-key"), Value: []byte("payload " + id), Headers: []kgo.RecordHeader{
			{Key: header, Value: []byte(value)}, {Key: "x-message-id", Value: []byte(id)}}}
	}
	bad := rec("secs-1", "x-deliver-at", strconv.FormatInt(secs, 10))
	if len(bad.Headers[0].Value) != 10 {
		t.Fatalf("x-deliver-at %q is not 10 digits", bad.Headers[0].Value)
	}
	if err := cl.ProduceSync(context.Background(), bad, rec("ok-1", "x-delay", "0")).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	var m struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	waitUntil(t, "secs-1 dead", 30*time.Second, func() bool {
		return e.bridge.api("GET", "/v1/messages/secs-1", nil, &m) == 200 && m.State == "dead"
	})
	// The reason is the label, then what was wrong with the value.
	if !strings.HasPrefix(m.Reason, "bad_deliver_at:") || !strings.Contains(m.Reason, "unix seconds") {
		t.Errorf("secs-1 dead with reason %q, want bad_deliver_at: … unix seconds …", m.Reason)
	}
	var dead deadList
	if code := e.bridge.api("GET", "/v1/dead?limit=100", nil, &dead); code != 200 || len(dead.Messages) != 1 ||
		dead.Messages[0].ID != "secs-1" || !strings.HasPrefix(dead.Messages[0].Reason, "bad_deliver_at:") {
		t.Errorf("GET /v1/dead: %d %+v, want secs-1 alone with reason bad_deliver_at: …", code, dead.Messages)
	}
	waitUntil(t, "ok-1 delivered", 30*time.Second, func() bool { return e.target.uniqueCount() >= 1 })
	if v := e.bridge.metric("messages_invalid_total", `route="orders"`, `reason="bad_deliver_at"`); v != 1 {
		t.Errorf(`messages_invalid_total{route="orders",reason="bad_deliver_at"} = %v, want 1`, v)
	}
	// The seconds value, had it been taken as seconds, would be due now: every chance to
	// (wrongly) arrive.
	time.Sleep(time.Until(time.Unix(secs, 0).Add(time.Second)))
	for _, a := range e.target.snapshot() {
		if id := a.headers["x-message-id"]; id != "ok-1" {
			t.Errorf("%s arrived on the target; only ok-1 should", id)
		}
	}
	if code := e.bridge.api("GET", "/v1/messages/secs-1", nil, &m); code != 200 || m.State != "dead" {
		t.Errorf("secs-1 at the end: %d %q, want dead", code, m.State)
	}
}

// secretCase is one broken configuration carrying a secret, and the secret text that
// must never be printed.
type secretCase struct {
	name, yaml, key string
	secrets         []string
}

// TestConfigErrorsNeverPrintSecrets runs the built binary's check-config and run with
// configurations whose secrets are wrong (a numeric redis.password, a list-typed
// kafka.sasl.password, an admin.token that is a map, an amqp.url without "://" carrying
// a password, a redis.addrs entry with userinfo), one at a time and all together, from
// the file, the environment and --set: each exits 1 naming the key, and no secret value
// appears on stdout or stderr.
func TestConfigErrorsNeverPrintSecrets(t *testing.T) {
	t.Parallel() // runs the binary only, on its own temp files: see the package doc
	const route = `routes:
  - name: orders
    from: { kafka: { topic: orders.delay } }
    to:   { kafka: { topic: orders } }
`
	cases := []secretCase{
		{"numeric redis.password", "redis: { addrs: [\"127.0.0.1:1\"], password: 918273645546372 }\n", "redis.password", []string{"918273645546372"}},
		{"list kafka.sasl.password", "kafka: { brokers: [\"127.0.0.1:1\"], sasl: { mechanism: PLAIN, username: u, password: [ZqSaslA, ZqSaslB] } }\n", "kafka.sasl.password", []string{"ZqSaslA", "ZqSaslB"}},
		{"map admin.token", "admin: { token: { x: ZqTokenC } }\n", "admin.token", []string{"ZqTokenC"}},
		{"amqp.url without ://", "amqp: { url: \"guest:ZqAmqpPw1@rabbit:5672\" }\n", "amqp.url", []string{"ZqAmqpPw1"}},
		{"redis.addrs with userinfo", "redis: { addrs: [\"app:ZqRedisPw2@redis:6379\"] }\n", "redis.addrs[0]", []string{"ZqRedisPw2"}},
	}
	dir := t.TempDir()
	var allSecrets []string
	for i, c := range cases {
		file := filepath.Join(dir, strconv.Itoa(i)+".yaml")
		if err := os.WriteFile(file, []byte(route+c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"check-config", "run"} {
			checkSecretsHidden(t, c.name+" ("+cmd+")", []string{c.key}, c.secrets, nil, cmd, "-c", file)
		}
		allSecrets = append(allSecrets, c.secrets...)
	}
	// Several at once: every key reported, no secret printed. Wrong types are reported
	// before the values are validated, so the two kinds make two files.
	for name, body := range map[string]string{
		"types": `redis: { addrs: ["127.0.0.1:1"], password: 918273645546372 }
kafka: { brokers: ["127.0.0.1:1"], sasl: { mechanism: PLAIN, username: u, password: [ZqSaslA, ZqSaslB] } }
admin: { token: { x: ZqTokenC } }
`,
		"addresses": `redis: { addrs: ["app:ZqRedisPw2@redis:6379"] }
amqp: { url: "guest:ZqAmqpPw1@rabbit:5672" }
`,
	} {
		keys := []string{"redis.password", "kafka.sasl.password", "admin.token"}
		if name == "addresses" {
			keys = []string{"redis.addrs[0]", "amqp.url"}
		}
		file := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(file, []byte(route+body), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"check-config", "run"} {
			checkSecretsHidden(t, "all "+name+" ("+cmd+")", keys, allSecrets, nil, cmd, "-c", file)
		}
	}
	// The environment and --set: the same wrong values as text.
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(route), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"check-config", "run"} {
		checkSecretsHidden(t, "env ("+cmd+")", []string{"amqp.url", "redis.addrs[0]"}, []string{"ZqEnvPw3", "ZqEnvPw4"},
			[]string{"DELAYBRIDGE_AMQP__URL=guest:ZqEnvPw3@rabbit:5672", "DELAYBRIDGE_REDIS__ADDRS=app:ZqEnvPw4@redis:6379"}, cmd, "-c", good)
		checkSecretsHidden(t, "--set ("+cmd+")", []string{"amqp.url", "redis.addrs[0]"}, []string{"ZqSetPw5", "ZqSetPw6"}, nil,
			cmd, "-c", good, "--set", "amqp.url=guest:ZqSetPw5@rabbit:5672", "--set", "redis.addrs=app:ZqSetPw6@redis:6379")
		checkSecretsHidden(t, "--set admin.token.x ("+cmd+")", []string{"admin.token.x"}, []string{"ZqSetTok7"}, nil,
			cmd, "-c", good, "--set", "admin.token.x=ZqSetTok7")
	}
}

// checkSecretsHidden runs the bridge binary with args (and env added to a minimal
// environment) and checks it exits 1 naming every key, printing no secret.
func checkSecretsHidden(t *testing.T, what string, keys, secrets, env []string, args ...string) {
	t.Helper()
	code, out, errOut := runBinary(t, env, args...)
	if code != 1 {
		t.Errorf("%s: exit status %d, want 1 (a broken configuration must stop it at once)\nstdout:\n%s\nstderr:\n%s", what, code, out, errOut)
	}
	for _, k := range keys {
		if !strings.Contains(errOut, k+":") {
			t.Errorf("%s: stderr does not name %s:\n%s", what, k, errOut)
		}
	}
	for _, s := range secrets {
		if strings.Contains(out, s) || strings.Contains(errOut, s) {
			t.Errorf("%s: secret %q printed:\nstdout:\n%s\nstderr:\n%s", what, s, out, errOut)
		}
	}
	if testing.Verbose() {
		t.Logf("%s: %s", what, strings.TrimSpace(fmt.Sprint(errOut)))
	}
}
