package main

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/delaybridge/delay-bridge/admin"
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
		"ctl ": {"get", "ls", "jobs", "cancel", "reschedule", "schedule", "stats", "routes", "dead", "requeue", "purge-dead", "ready"},
		"ctl --addr " + url + " --token tok schedule --route ": {"orders"},
		"ctl --addr " + url + " --token tok requeue ":          {"d1"},
		"ctl stats -o ":   {"table", "json", "yaml"},
		"ctl jobs ":       {"start", "list", "get"},
		"ctl jobs start ": {"cancel", "reschedule", "requeue-dead", "purge-dead"},
		"ctl ls --state ": {"pending", "inflight", "dead"},
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

// TestCtlBrowse: ls sends the filters, shows a page with the cursor of the next, and
// --all reads every page.
func TestCtlBrowse(t *testing.T) {
	b, url := startAdmin(t, "")
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return call(t, append([]string{"ctl", "--addr", url}, args...)...)
	}
	code, out, errOut := ctl("ls", "--route", "orders", "--state", "pending", "--due-from", "2026-01-01T00:00:00Z",
		"--due-to", "1800000000000", "--id-prefix", "p", "--key-prefix", "k", "--limit", "2")
	if code != exitOK || !strings.Contains(out, "p1") || !strings.Contains(out, "p2") || strings.Contains(out, "p3") ||
		!strings.Contains(out, "2 message(s); more with --cursor c2") {
		t.Fatalf("ls: %d %q\n%s", code, errOut, out)
	}
	want := admin.Query{Filter: admin.Filter{Route: "orders", State: "pending", DueFrom: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), DueTo: 1_800_000_000_000, IDPrefix: "p", KeyPrefix: "k"}, Limit: 2}
	if b.browsed[0] != want {
		t.Errorf("browse query %+v, want %+v", b.browsed[0], want)
	}
	if code, out, _ := ctl("ls", "--cursor", "c2"); code != exitOK || !strings.Contains(out, "p3") || strings.Contains(out, "more with") {
		t.Errorf("ls --cursor: %d\n%s", code, out)
	}
	var all admin.MessageList
	code, out, _ = ctl("ls", "--all", "-o", "json")
	if err := json.Unmarshal([]byte(out), &all); err != nil || code != exitOK || all.Count != 3 || all.NextCursor != "" || all.Messages[2].ID != "p3" {
		t.Errorf("ls --all: %d %v %+v", code, err, all)
	}
	if code, _, errOut := ctl("ls", "--due-from", "yesterday"); code != exitUsage || !strings.Contains(errOut, "--due-from") {
		t.Errorf("ls bad time: %d %q", code, errOut)
	}
	if code, _, _ := ctl("ls", "--limit", "0"); code != exitUsage {
		t.Errorf("ls --limit 0: %d", code)
	}
}

// TestCtlJobs: a dry run previews and starts nothing; cancel and purge-dead ask (or
// need --yes); reschedule takes --shift or --at; --wait follows the job to its end;
// list and get show it.
func TestCtlJobs(t *testing.T) {
	b, url := startAdmin(t, "")
	run := func(input string, terminal bool, args ...string) (int, string, string) {
		t.Helper()
		return callWith(t, input, terminal, append([]string{"ctl", "--addr", url, "jobs"}, args...)...)
	}
	code, out, errOut := run("", false, "start", "cancel", "--route", "orders", "--dry-run", "--sample", "2")
	if code != exitOK || !strings.Contains(out, "cancel would touch 3 message(s) matching route=orders") ||
		!strings.Contains(out, "p2") || strings.Contains(out, "p3") || len(b.startedJobs()) != 0 {
		t.Errorf("dry run: %d %q\n%s", code, errOut, out)
	}
	if code, _, errOut := run("", false, "start", "cancel", "--route", "orders"); code != exitUsage ||
		!strings.Contains(errOut, "add --yes") || len(b.startedJobs()) != 0 {
		t.Errorf("cancel without a terminal: %d %q", code, errOut)
	}
	code, out, errOut = run("y\n", true, "start", "purge-dead", "--route", "orders", "--wait")
	jobs := b.startedJobs()
	if code != exitOK || !strings.Contains(errOut, "Purge dead 3 message(s) matching route=orders state=dead? [y/N]") ||
		len(jobs) != 1 || jobs[0].Kind != admin.JobPurgeDead || !strings.Contains(out, "3 done, 0 failed of 3 matched") {
		t.Errorf("purge-dead confirmed: %d %q %v\n%s", code, errOut, jobs, out)
	}
	code, out, _ = run("", false, "start", "reschedule", "--route", "orders", "--shift", "-90s", "-o", "json")
	jobs = b.startedJobs()
	if code != exitOK || len(jobs) != 1 || jobs[0].ShiftMs != -90000 || !strings.Contains(out, `"state": "queued"`) {
		t.Errorf("reschedule --shift: %d %v\n%s", code, jobs, out)
	}
	if code, _, _ := run("", false, "start", "reschedule", "--at", "2030-01-01T00:00:00Z"); code != exitOK ||
		b.startedJobs()[0].DeliverAt != time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() {
		t.Errorf("reschedule --at: %d", code)
	}
	if code, _, errOut := run("", false, "start", "explode"); code != exitUsage || !strings.Contains(errOut, "requeue-dead") {
		t.Errorf("unknown kind: %d %q", code, errOut)
	}
	if code, _, errOut := run("", false, "start", "reschedule", "--at", "5", "--shift", "1s"); code != exitUsage || !strings.Contains(errOut, "not both") {
		t.Errorf("--at and --shift: %d %q", code, errOut)
	}
	if code, out, _ := run("", false, "list"); code != exitOK || !strings.Contains(out, "j1") || !strings.Contains(out, "reschedule") {
		t.Errorf("jobs list: %d\n%s", code, out)
	}
	if code, out, _ := run("", false, "get", "j1"); code != exitOK || !strings.Contains(out, "STATE:") || !strings.Contains(out, "done") {
		t.Errorf("jobs get: %d\n%s", code, out)
	}
	if code, _, errOut := run("", false, "get", "j9"); code != exitError || !strings.Contains(errOut, "404") {
		t.Errorf("jobs get unknown: %d %q", code, errOut)
	}
	if code, _, _ := run("", false); code != exitUsage {
		t.Errorf("jobs without a command: %d", code)
	}
}
