package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/config"
)

const goodConfig = `
cluster: test
redis: {addrs: ["127.0.0.1:6379"], password: hunter2}
amqp: {url: "amqp://app:rabbitpw@rabbit:5672/"}
admin: {listen: "127.0.0.1:0", token: adm1n}
routes:
  - name: orders
    from: { kafka: { topic: orders.delay } }
    to:   { kafka: { topic: orders } }
  - name: billing
    from: { amqp: { queue: billing.delay } }
    to:   { amqp: { exchange: billing } }
`

const brokenConfig = `
redis: {adrs: ["x"]}
scheduler: {tick: 5}
routes:
  - name: a
    from: {kafka: {topic: t}}
    to: {kafka: {topic: t}}
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckConfigGood(t *testing.T) {
	file := writeConfig(t, goodConfig)
	code, out, errOut := call(t, "check-config", "-c", file, "--set", "scheduler.tick=2ms")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, secret := range []string{"hunter2", "rabbitpw", "adm1n"} {
		if strings.Contains(out, secret) {
			t.Errorf("secret %q printed:\n%s", secret, out)
		}
	}
	for _, want := range []string{"password: '*****'", "token: '*****'", "url: amqp://app:*****@rabbit:5672/", "tick: 2ms", "cluster: test", "exchange_type: topic"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The printed configuration is itself a valid configuration.
	if _, err := config.Load(config.LoadOptions{File: writeConfig(t, out), Env: []string{}}); err != nil {
		t.Errorf("printed configuration does not load: %v", err)
	}

	// The file as an argument; -q prints nothing.
	if code, out, _ := call(t, "check-config", "-q", file); code != exitOK || out != "" {
		t.Errorf("-q: %d %q", code, out)
	}
	// The environment is part of the effective configuration.
	environ = func() []string { return []string{"DELAYBRIDGE_SHARDS=7"} }
	defer func() { environ = func() []string { return []string{} } }()
	if code, out, _ := call(t, "check-config", file); code != exitOK || !strings.Contains(out, "shards: 7\n") {
		t.Errorf("env: %d %q", code, out)
	}
}

func TestCheckConfigBroken(t *testing.T) {
	file := writeConfig(t, brokenConfig)
	code, out, errOut := call(t, "check-config", "-c", file)
	if code != exitError || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{"invalid configuration (2 problems)", "redis.adrs: unknown key", "scheduler.tick: want a Go duration", "file " + file} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	// Once it loads, every validation problem is listed.
	code, _, errOut = call(t, "check-config", "-c", writeConfig(t, goodConfig), "--set", "shards=0", "--set", "log.level=loud")
	if code != exitError || !strings.Contains(errOut, "shards: must be between") || !strings.Contains(errOut, "log.level: must be") ||
		!strings.Contains(errOut, "(flag --set shards)") {
		t.Errorf("validation: %d\n%s", code, errOut)
	}

	if code, _, errOut := call(t, "check-config", "a.yaml", "b.yaml"); code != exitUsage || !strings.Contains(errOut, `unexpected argument "b.yaml"`) {
		t.Errorf("two files: %d %q", code, errOut)
	}
	if code, _, _ := call(t, "check-config", "-c", "a.yaml", "b.yaml"); code != exitUsage {
		t.Errorf("-c and argument: %d", code)
	}
	if code, _, errOut := call(t, "check-config", filepath.Join(t.TempDir(), "missing.yaml")); code != exitError || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("missing file: %d %q", code, errOut)
	}
}

func TestRunConfigErrors(t *testing.T) {
	code, _, errOut := call(t, "run", "-c", writeConfig(t, brokenConfig))
	if code != exitError || !strings.Contains(errOut, "run: invalid configuration") || !strings.Contains(errOut, "redis.adrs") {
		t.Errorf("run broken: %d %q", code, errOut)
	}
	if code, _, errOut := call(t, "run", "bridge.yaml"); code != exitUsage || !strings.Contains(errOut, "after -c") {
		t.Errorf("run positional: %d %q", code, errOut)
	}
}
