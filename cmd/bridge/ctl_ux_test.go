package main

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// fixNow pins the time relative times are shown against.
func fixNow(t *testing.T, at time.Time) {
	t.Helper()
	now = func() time.Time { return at }
	t.Cleanup(func() { now = time.Now })
}

func TestHumanTimes(t *testing.T) {
	fixNow(t, time.UnixMilli(1_000_000))
	for _, c := range []struct {
		ms   int64
		want string
	}{
		{1_000_000 + 192_000, "in 3m12s"},
		{1_000_000 - 5_000, "5s ago"},
		{1_000_000 + 300, "now"},
		{1_000_000 + 2*3600_000 + 5*60_000 + 40_000, "in 2h5m"},
		{1_000_000 - (3*24+4)*3600_000, "3d4h ago"},
	} {
		want := time.UnixMilli(c.ms).Local().Format(time.RFC3339) + " (" + c.want + ")"
		if got := when(c.ms); got != want {
			t.Errorf("when(%d) = %q, want %q", c.ms, got, want)
		}
	}
	if when(0) != "-" {
		t.Errorf("when(0) = %q", when(0))
	}
	if got := human(450 * time.Millisecond); got != "450ms" {
		t.Errorf("human(450ms) = %q", got)
	}
}

// TestCtlOutputFormats: tables by default with human times, -o yaml the same fields and
// numbers as -o json, an unknown format a usage error.
func TestCtlOutputFormats(t *testing.T) {
	_, url := startAdmin(t, "")
	fixNow(t, time.UnixMilli(5000).Add(-72*time.Second))
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return call(t, append([]string{"ctl", "--addr", url}, args...)...)
	}
	code, out, errOut := ctl("get", "m1")
	for _, want := range []string{"ID:", "m1", "STATE:", "pending", "ROUTE:", "orders", "SOURCE:", "orders.delay",
		"DUE:", time.UnixMilli(5000).Local().Format(time.RFC3339) + " (in 1m12s)", "PAYLOAD:", "4 bytes"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("get table lacks %q (exit %d %s):\n%s", want, code, errOut, out)
		}
	}
	_, jsonOut, _ := ctl("get", "m1", "-o", "json")
	code, yamlOut, errOut := ctl("-o", "yaml", "get", "m1")
	var fromJSON, fromYAML map[string]any
	if err := json.Unmarshal([]byte(jsonOut), &fromJSON); err != nil {
		t.Fatalf("json: %v\n%s", err, jsonOut)
	}
	if err := yaml.Unmarshal([]byte(yamlOut), &fromYAML); err != nil || code != exitOK {
		t.Fatalf("yaml: exit %d %v %s\n%s", code, err, errOut, yamlOut)
	}
	if !strings.Contains(yamlOut, "due_at: 5000\n") || strings.Contains(yamlOut, "{") {
		t.Errorf("yaml is not block style with integers:\n%s", yamlOut)
	}
	for k, v := range fromJSON {
		if n, ok := v.(float64); ok {
			v = int(n)
		}
		if !reflect.DeepEqual(fromYAML[k], v) {
			t.Errorf("yaml %s = %#v, json %#v", k, fromYAML[k], v)
		}
	}
	if code, out, _ := ctl("dead"); code != exitOK || !strings.Contains(out, "REASON") || !strings.Contains(out, "bad_delay") ||
		!strings.Contains(out, "1 dead letter(s) shown") {
		t.Errorf("dead table: %d\n%s", code, out)
	}
	if code, out, _ := ctl("schedule", "--route", "orders", "--delay", "5s", "--id", "x1"); code != exitOK ||
		!strings.HasPrefix(out, "scheduled x1, due "+time.UnixMilli(6000).Local().Format(time.RFC3339)) {
		t.Errorf("schedule: %d %q", code, out)
	}
	if code, out, _ := ctl("requeue", "d1", "-o", "yaml"); code != exitOK || out != "id: d1\ndue_at: 1000\n" {
		t.Errorf("requeue -o yaml: %d %q", code, out)
	}
	if code, _, errOut := ctl("-o", "xml", "stats"); code != exitUsage || !strings.Contains(errOut, "table, json, yaml") {
		t.Errorf("-o xml: %d %q", code, errOut)
	}
}

// TestCtlConfirmation: cancel and purge-dead ask on a terminal, refuse (exit 2) without
// one unless --yes, and change nothing when the answer is not yes.
func TestCtlConfirmation(t *testing.T) {
	b, url := startAdmin(t, "")
	run := func(input string, terminal bool, args ...string) (int, string, string) {
		t.Helper()
		return callWith(t, input, terminal, append([]string{"ctl", "--addr", url}, args...)...)
	}
	for _, c := range []struct {
		args []string
		call string
		ask  string
	}{
		{[]string{"cancel", "m1"}, "cancel m1", `Cancel message "m1" (pending, route orders, due `},
		{[]string{"purge-dead"}, "purge", "Delete all 1 dead letters? [y/N]"},
		{[]string{"purge"}, "purge", "Delete all 1 dead letters? [y/N]"},
	} {
		name := strings.Join(c.args, " ")
		code, _, errOut := run("", false, c.args...)
		if code != exitUsage || !strings.Contains(errOut, "standard input is not a terminal; add --yes") || len(b.called()) != 0 {
			t.Errorf("%s without a terminal: exit %d %q", name, code, errOut)
		}
		code, _, errOut = run("n\n", true, c.args...)
		if code != exitError || !strings.Contains(errOut, c.ask) || !strings.Contains(errOut, "nothing changed") || len(b.called()) != 0 {
			t.Errorf("%s answered n: exit %d %q", name, code, errOut)
		}
		code, out, errOut := run("y\n", true, c.args...)
		if got := b.called(); code != exitOK || !slices.Equal(got, []string{c.call}) {
			t.Errorf("%s answered y: exit %d calls %v %q %q", name, code, got, out, errOut)
		}
		code, out, _ = run("", false, append(c.args, "--yes")...)
		if got := b.called(); code != exitOK || !slices.Equal(got, []string{c.call}) {
			t.Errorf("%s --yes: exit %d calls %v %q", name, code, got, out)
		}
	}
	if code, out, _ := run("", false, "cancel", "m1", "-y"); code != exitOK || out != "cancelled m1 (was pending)\n" {
		t.Errorf("cancel -y: %d %q", code, out)
	}
	// An unknown id is reported before anything is asked.
	if code, _, errOut := run("y\n", true, "cancel", "nope"); code != exitError || !strings.Contains(errOut, "404") || strings.Contains(errOut, "[y/N]") {
		t.Errorf("cancel unknown: %d %q", code, errOut)
	}
}

// TestCompletion: cobra's completion scripts for every shell, and the dynamic
// completions they call (subcommands, ctl commands, route names and dead-letter ids
// from the admin API, output formats).
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		code, out, errOut := call(t, "completion", shell)
		if code != exitOK || !strings.Contains(out, "bridge") || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s: exit %d %q\n%.300s", shell, code, errOut, out)
		}
	}
	if code, _, _ := call(t, "completion", "tcsh"); code != exitUsage {
		t.Errorf("completion tcsh: exit %d, want %d", code, exitUsage)
	}
	_, url := startAdmin(t, "tok")
	complete := func(args ...string) []string {
		t.Helper()
		code, out, errOut := call(t, append([]string{"__complete"}, args...)...)
		if code != exitOK {
			t.Fatalf("__complete %v: exit %d %s", args, code, errOut)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, ":") {
				got = append(got, strings.SplitN(l, "\t", 2)[0])
			}
		}
		return got
	}
	for args, want := range map[string][]string{
		"":     {"run", "dev", "ctl", "check-config", "version", "completion"},
		"ctl ": {"get", "cancel", "reschedule", "schedule", "stats", "routes", "dead", "requeue", "purge-dead", "ready"},
		"ctl --addr " + url + " --token tok schedule --route ": {"orders"},
		"ctl --addr " + url + " --token tok requeue ":          {"d1"},
		"ctl stats -o ": {"table", "json", "yaml"},
	} {
		got := complete(strings.Split(args, " ")...)
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("completing %q: %v lacks %q", args, got, w)
			}
		}
	}
	// No answer from the API: nothing offered, no error.
	if got := complete("ctl", "--addr", "http://127.0.0.1:1", "schedule", "--route", ""); len(got) != 0 {
		t.Errorf("completion without an API: %v", got)
	}
}
