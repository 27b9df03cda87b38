package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests control the environment configuration is loaded from.
	environ = func() []string { return []string{} }
	goleak.VerifyTestMain(m)
}

// call runs a command line through execute, with no terminal and nothing on stdin.
func call(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return callWith(t, "", false, args...)
}

// callWith runs a command line with input on stdin, as if stdin were a terminal or not.
func callWith(t *testing.T, input string, terminal bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(input), stdout: &out, stderr: &errOut, terminal: func() bool { return terminal }}
	code = execute(args, env)
	return code, out.String(), errOut.String()
}

// commandNames are the subcommands of a fresh command tree (cobra's own help and
// completion aside).
func commandNames() []string {
	var names []string
	for _, c := range newRoot(&cliEnv{}).Commands() {
		if !c.Hidden {
			names = append(names, c.Name())
		}
	}
	return names
}

func TestDispatchAndUsage(t *testing.T) {
	code, _, errOut := call(t)
	if code != exitUsage || !strings.Contains(errOut, "Usage:\n  bridge [flags]") || !strings.Contains(errOut, "missing command") {
		t.Errorf("no args: %d %q", code, errOut)
	}
	for _, name := range []string{"run", "dev", "ctl", "check-config", "version", "completion"} {
		if !strings.Contains(errOut, "\n  "+name+" ") {
			t.Errorf("usage does not list %q:\n%s", name, errOut)
		}
	}
	if strings.Index(errOut, "\n  run ") > strings.Index(errOut, "\n  version ") {
		t.Errorf("usage does not list run first:\n%s", errOut)
	}
	code, out, _ := call(t, "help")
	if code != exitOK || !strings.Contains(out, "Available Commands:") {
		t.Errorf("help: %d %q", code, out)
	}
	code, _, errOut = call(t, "frobnicate")
	if code != exitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown: %d %q", code, errOut)
	}
	if code, _, errOut = call(t, "chek-config"); code != exitUsage || !strings.Contains(errOut, `did you mean "check-config"`) {
		t.Errorf("misspelt: %d %q", code, errOut)
	}
	// Every subcommand has usage text on --help, exit 0.
	for _, name := range commandNames() {
		code, out, _ := call(t, name, "--help")
		if code != exitOK || !strings.Contains(out, "Usage:\n  bridge "+name) {
			t.Errorf("%s --help: %d %q", name, code, out)
		}
		code, out, _ = call(t, "help", name)
		if code != exitOK || !strings.Contains(out, "Usage:\n  bridge "+name) {
			t.Errorf("help %s: %d %q", name, code, out)
		}
		code, _, errOut := call(t, name, "--no-such-flag")
		if code != exitUsage || !strings.Contains(errOut, "no-such-flag") || !strings.Contains(errOut, "Usage:\n  bridge "+name) {
			t.Errorf("%s --no-such-flag: %d %q", name, code, errOut)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := call(t, "version")
	if code != exitOK || !strings.Contains(out, "delay-bridge 0.1.0\n") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: %d %q", code, out)
	}
	if code, _, _ := call(t, "version", "extra"); code != exitUsage {
		t.Errorf("version extra: %d", code)
	}
	if code, out, _ := call(t, "--version"); code != exitOK || !strings.Contains(out, "delay-bridge") {
		t.Errorf("--version: %d %q", code, out)
	}
}

// TestBinary builds the real binary with a version stamped by -ldflags and checks exit
// codes as a shell sees them.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bridge")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=9.9.9-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	good := writeConfig(t, goodConfig)
	broken := writeConfig(t, brokenConfig)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"version"}, 0, "delay-bridge 9.9.9-test"},
		{[]string{"check-config", "-c", good}, 0, "token: '*****'"},
		{[]string{"check-config", broken}, 1, "scheduler.tick"},
		{[]string{"check-config", "--nope"}, 2, "unknown flag"},
		{[]string{"nope"}, 2, "unknown command"},
		{[]string{"run", "-c", broken}, 1, "invalid configuration"},
		{[]string{"ctl", "--addr", "http://127.0.0.1:1", "stats"}, 1, "connection refused"},
	}
	for _, c := range cases {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("bridge %s: exit %d, want %d; output must contain %q:\n%s", strings.Join(c.args, " "), code, c.code, c.want, out)
		}
	}
}

// TestDevModeLinkedOnlyWithoutNodev: the default binary links the embedded Kafka and
// Redis of `bridge dev`; -tags nodev leaves them (and the dev package) out; the
// service's own packages never import them; a nodev binary says so when asked for dev.
func TestDevModeLinkedOnlyWithoutNodev(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list and go build")
	}
	deps := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list", "-deps"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	const devPkg = "github.com/delaybridge/delay-bridge/cmd/bridge/internal/dev"
	embedded := []string{"github.com/twmb/franz-go/pkg/kfake\n", "github.com/alicebob/miniredis/v2\n"}
	if all := deps("."); !strings.Contains(all, devPkg+"\n") || !strings.Contains(all, embedded[0]) {
		t.Errorf("the default build does not link dev mode (kfake): the checks below prove nothing")
	}
	for _, d := range append(embedded, devPkg+"\n") {
		if n := strings.Count(deps("-tags", "nodev", "."), d); n != 0 {
			t.Errorf("-tags nodev still links %s", strings.TrimSpace(d))
		}
		if n := strings.Count(deps("github.com/delaybridge/delay-bridge/app", "github.com/delaybridge/delay-bridge/admin"), d); n != 0 {
			t.Errorf("the service's packages import %s", strings.TrimSpace(d))
		}
	}

	bin := filepath.Join(t.TempDir(), "bridge-nodev")
	if out, err := exec.Command("go", "build", "-tags", "nodev", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nodev: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "dev", "--exit").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "built without dev mode (-tags nodev)") {
		t.Errorf("nodev binary's dev: %v\n%s", err, out)
	}
	if out, _ := exec.Command(bin, "--help").CombinedOutput(); strings.Contains(string(out), "\n  dev ") || !strings.Contains(string(out), "\n  run ") {
		t.Errorf("nodev binary's help:\n%s", out)
	}
}
