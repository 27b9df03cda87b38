package main

import (
	"bytes"
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

// call runs a command line through dispatch.
func call(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = dispatch(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDispatchAndUsage(t *testing.T) {
	code, _, errOut := call(t)
	if code != exitUsage || !strings.Contains(errOut, "Usage: bridge COMMAND") {
		t.Errorf("no args: %d %q", code, errOut)
	}
	for _, name := range []string{"run", "ctl", "check-config", "version"} {
		if !strings.Contains(errOut, "\n  "+name+" ") {
			t.Errorf("usage does not list %q:\n%s", name, errOut)
		}
	}
	code, out, _ := call(t, "help")
	if code != exitOK || !strings.Contains(out, "Commands:") {
		t.Errorf("help: %d %q", code, out)
	}
	code, _, errOut = call(t, "frobnicate")
	if code != exitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown: %d %q", code, errOut)
	}
	// Every subcommand has usage text on --help, exit 0.
	for name := range commands {
		code, out, _ := call(t, name, "--help")
		if code != exitOK || !strings.Contains(out, "Usage: bridge "+name) {
			t.Errorf("%s --help: %d %q", name, code, out)
		}
		code, out, _ = call(t, "help", name)
		if code != exitOK || !strings.Contains(out, "Usage: bridge "+name) {
			t.Errorf("help %s: %d %q", name, code, out)
		}
		code, _, errOut := call(t, name, "--no-such-flag")
		if code != exitUsage || !strings.Contains(errOut, "no-such-flag") || !strings.Contains(errOut, "Usage: bridge "+name) {
			t.Errorf("%s --no-such-flag: %d %q", name, code, errOut)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := call(t, "version")
	if code != exitOK || !strings.Contains(out, "delay-bridge dev\n") || !strings.Contains(out, runtime.Version()) {
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
