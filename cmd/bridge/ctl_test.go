package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
)

// ctlBackend is a small in-memory admin.Backend, so ctl is tested against the real admin
// server and client.
type ctlBackend struct {
	admin.Unimplemented // bulk jobs: 501
	mu                  sync.Mutex
	sched               []admin.ScheduleRequest
	resched             map[string]admin.When
	deadLim             int
	notReady            error
	calls               []string // cancel and purge calls made
	browsed             []admin.Query
	jobs                []admin.JobSpec // started (startedJobs forgets them)
	lastJob             *admin.JobSpec  // the last started, for GetJob
}

func (b *ctlBackend) Schedule(_ context.Context, r admin.ScheduleRequest) (admin.Scheduled, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sched = append(b.sched, r)
	id := r.ID
	if id == "" {
		id = "generated-1"
	}
	return admin.Scheduled{ID: id, DueAt: 1000 + r.When.Delay.Milliseconds()}, nil
}

func (b *ctlBackend) Get(_ context.Context, id string) (admin.Message, error) {
	if id != "m1" && id != "orders.delay/0/7" {
		return admin.Message{}, fmt.Errorf("no message %q: %w", id, admin.ErrNotFound)
	}
	return admin.Message{ID: id, State: admin.StatePending, DueAt: 5000, Route: "orders", Source: "orders.delay", PayloadSize: 4}, nil
}

func (b *ctlBackend) Cancel(_ context.Context, id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, "cancel "+id)
	if id != "m1" {
		return "", fmt.Errorf("no message %q: %w", id, admin.ErrNotFound)
	}
	return admin.StatePending, nil
}

func (b *ctlBackend) Reschedule(_ context.Context, id string, w admin.When) (admin.Scheduled, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resched[id] = w
	due := w.DeliverAt.UnixMilli()
	if w.DeliverAt.IsZero() {
		due = 1000 + w.Delay.Milliseconds()
	}
	return admin.Scheduled{ID: id, DueAt: due}, nil
}

func (b *ctlBackend) Stats(context.Context) (admin.Stats, error) {
	return admin.Stats{
		Totals:   admin.Counts{Pending: 12, Inflight: 3, Dead: 1},
		Shards:   []admin.ShardStats{{Shard: 0, Counts: admin.Counts{Pending: 12, Inflight: 3, Dead: 1}, NextDue: 1_700_000_000_000, Owner: "pod-a-1"}, {Shard: 1}},
		Routes:   map[string]admin.Counts{"orders": {Pending: 12, Inflight: 3, Dead: 1}},
		Instance: "pod-a-1", Members: []string{"pod-a-1", "pod-b-1"},
	}, nil
}

func (b *ctlBackend) Browse(_ context.Context, q admin.Query) (admin.Page, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q.Filter.State == admin.StateDead {
		b.deadLim = q.Limit
		return admin.Page{Messages: []admin.Message{{ID: "d1", State: admin.StateDead, Reason: "bad_delay"}}}, nil
	}
	// Pending messages in two pages: p1, p2 then p3.
	b.browsed = append(b.browsed, q)
	msg := func(id string, due int64) admin.Message {
		return admin.Message{ID: id, State: admin.StatePending, Route: "orders", DueAt: due, PayloadSize: 3}
	}
	if q.Cursor == "" {
		return admin.Page{Messages: []admin.Message{msg("p1", 5000), msg("p2", 6000)}, NextCursor: "c2"}, nil
	}
	return admin.Page{Messages: []admin.Message{msg("p3", 7000)}}, nil
}

func (b *ctlBackend) RequeueDead(_ context.Context, id string) (admin.Scheduled, error) {
	if id != "d1" {
		return admin.Scheduled{}, fmt.Errorf("no dead letter %q: %w", id, admin.ErrNotFound)
	}
	return admin.Scheduled{ID: id, DueAt: 1000}, nil
}

func (b *ctlBackend) PurgeDead(context.Context, admin.Filter) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, "purge")
	return 4, nil
}

// called returns the cancel and purge calls made so far and forgets them.
func (b *ctlBackend) called() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls
	b.calls = nil
	return c
}

func (b *ctlBackend) Routes(context.Context) (admin.RoutesResponse, error) {
	return admin.RoutesResponse{Instance: "pod-a-1", Routes: []admin.RouteStatus{{
		Name:    "orders",
		Ingress: admin.IngressStatus{Source: "kafka:orders.delay", State: "stalled", Detail: "no progress for 20s with lag 42", Partitions: []int{0, 3}, Lag: 42, Rebuilds: 2},
		Egress:  admin.EgressStatus{Broker: "kafka", Target: "orders", Reachable: false, Detail: "connection refused"},
	}}}, nil
}

func (b *ctlBackend) Ready(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.notReady
}

func startAdmin(t *testing.T, token string) (*ctlBackend, string) {
	t.Helper()
	b := &ctlBackend{resched: map[string]admin.When{}}
	srv := admin.NewServer(admin.Options{Backend: b, Token: token, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return b, ts.URL
}

func TestCtl(t *testing.T) {
	b, url := startAdmin(t, "tok")
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return call(t, append([]string{"ctl", "--addr", url, "--token", "tok"}, args...)...)
	}
	// ctlJSON asks for the API's JSON answer (-o json; tables are the default).
	ctlJSON := func(args ...string) (int, string, string) {
		t.Helper()
		return ctl(append(args, "-o", "json")...)
	}
	decode := func(out string) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		return m
	}

	code, out, errOut := ctlJSON("get", "m1")
	if code != exitOK || decode(out)["state"] != "pending" || decode(out)["route"] != "orders" {
		t.Errorf("get: %d %q %q", code, out, errOut)
	}
	if code, out, _ := ctlJSON("get", "orders.delay/0/7"); code != exitOK || decode(out)["id"] != "orders.delay/0/7" {
		t.Errorf("get slash id: %d %q", code, out)
	}
	code, _, errOut = ctl("get", "nope")
	if code != exitError || !strings.Contains(errOut, "404") || !strings.Contains(errOut, `no message "nope"`) {
		t.Errorf("get unknown: %d %q", code, errOut)
	}
	if code, out, _ := ctlJSON("cancel", "m1", "--yes"); code != exitOK || decode(out)["prior_state"] != "pending" {
		t.Errorf("cancel: %d %q", code, out)
	}
	if code, out, _ := ctlJSON("reschedule", "m1", "--delay", "1m30s"); code != exitOK || decode(out)["due_at"] != float64(91000) {
		t.Errorf("reschedule: %d %q", code, out)
	}
	if code, _, _ := ctl("reschedule", "m1", "--at", "2030-01-02T03:04:05Z"); code != exitOK ||
		!b.resched["m1"].DeliverAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("reschedule --at: %d %v", code, b.resched["m1"])
	}
	if code, _, errOut := ctl("reschedule", "m1"); code != exitUsage || !strings.Contains(errOut, "--delay or --at") {
		t.Errorf("reschedule without time: %d %q", code, errOut)
	}
	if code, _, errOut := ctl("reschedule", "m1", "--delay", "1s", "--at", "5"); code != exitUsage || !strings.Contains(errOut, "not both") {
		t.Errorf("reschedule both: %d %q", code, errOut)
	}
	if code, _, _ := ctl("reschedule", "--delay", "1s"); code != exitUsage {
		t.Errorf("reschedule without id: %d", code)
	}

	// schedule with headers, key, id and a payload from a file.
	pf := filepath.Join(t.TempDir(), "p.bin")
	if err := os.WriteFile(pf, []byte{0, 1, 2, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = ctlJSON("schedule", "--route", "orders", "--delay", "5s", "--payload-file", pf, "--key", "k1",
		"--id", "x1", "--header", "traceparent=00-abc", "--header", "a=b=c")
	if code != exitOK || decode(out)["id"] != "x1" || decode(out)["due_at"] != float64(6000) {
		t.Fatalf("schedule: %d %q %q", code, out, errOut)
	}
	got := b.sched[len(b.sched)-1]
	if got.Route != "orders" || string(got.Payload) != "\x00\x01\x02\xff" || string(got.Key) != "k1" ||
		got.Headers["traceparent"] != "00-abc" || got.Headers["a"] != "b=c" || got.When.Delay != 5*time.Second {
		t.Errorf("scheduled %+v", got)
	}
	if code, _, _ := ctl("schedule", "--route", "orders", "--at", "1700000000000", "--payload", "hi"); code != exitOK ||
		string(b.sched[len(b.sched)-1].Payload) != "hi" || b.sched[len(b.sched)-1].Key != nil {
		t.Errorf("schedule --at: %d %+v", code, b.sched[len(b.sched)-1])
	}
	if code, _, errOut := ctl("schedule", "--delay", "1s"); code != exitUsage || !strings.Contains(errOut, "--route is required") {
		t.Errorf("schedule without route: %d %q", code, errOut)
	}
	if code, _, errOut := ctl("schedule", "--route", "r", "--delay", "1s", "--header", "nokv"); code != exitUsage || !strings.Contains(errOut, "k=v") {
		t.Errorf("schedule bad header: %d %q", code, errOut)
	}

	code, out, _ = ctl("stats")
	for _, want := range []string{"TOTAL", "pending 12", "inflight 3", "ROUTE", "orders", "SHARD", "pod-a-1", when(1_700_000_000_000), "members: pod-a-1, pod-b-1"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("stats table lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	if code, out, _ := ctl("stats", "--json"); code != exitOK || decode(out)["totals"].(map[string]any)["pending"] != float64(12) {
		t.Errorf("stats --json: %d %q", code, out)
	}

	code, out, _ = ctl("routes")
	for _, want := range []string{"ROUTE", "orders", "false", "kafka:orders.delay", "stalled", "42", "0,3", "kafka:orders",
		"no progress for 20s with lag 42; egress: connection refused"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("routes table lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	if code, out, _ := ctl("routes", "--json"); code != exitOK || decode(out)["instance"] != "pod-a-1" {
		t.Errorf("routes --json: %d %q", code, out)
	}

	if code, out, _ := ctlJSON("dead", "--limit", "5"); code != exitOK || decode(out)["count"] != float64(1) || b.deadLim != 5 {
		t.Errorf("dead: %d %q limit %d", code, out, b.deadLim)
	}
	if code, _, _ := ctl("dead", "--limit", "0"); code != exitUsage {
		t.Errorf("dead --limit 0: %d", code)
	}
	if code, out, _ := ctlJSON("requeue", "d1"); code != exitOK || decode(out)["id"] != "d1" {
		t.Errorf("requeue: %d %q", code, out)
	}
	if code, _, _ := ctl("requeue", "zz"); code != exitError {
		t.Errorf("requeue unknown: %d", code)
	}
	if code, out, _ := ctlJSON("purge-dead", "--yes"); code != exitOK || decode(out)["purged"] != float64(4) {
		t.Errorf("purge-dead: %d %q", code, out)
	}
	if code, out, _ := ctl("ready"); code != exitOK || out != "ready\n" {
		t.Errorf("ready: %d %q", code, out)
	}
	b.mu.Lock()
	b.notReady = fmt.Errorf("%w: no shards owned yet", admin.ErrUnavailable)
	b.mu.Unlock()
	if code, _, errOut := ctl("ready"); code != exitError || !strings.Contains(errOut, "no shards owned yet") {
		t.Errorf("not ready: %d %q", code, errOut)
	}

	// Usage errors.
	if code, _, errOut := ctl(); code != exitUsage || !strings.Contains(errOut, "missing COMMAND") {
		t.Errorf("no command: %d %q", code, errOut)
	}
	if code, _, _ := ctl("explode"); code != exitUsage {
		t.Errorf("unknown ctl command: %d", code)
	}
	if code, _, errOut := ctl("get"); code != exitUsage || !strings.Contains(errOut, "bridge ctl get: missing ID") {
		t.Errorf("get without id: %d %q", code, errOut)
	}
	if code, _, errOut := ctl("stats", "extra"); code != exitUsage || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("stats extra: %d %q", code, errOut)
	}
	if code, out, _ := ctl("get", "--help"); code != exitOK || !strings.Contains(out, "bridge ctl get ID") {
		t.Errorf("get --help: %d %q", code, out)
	}

	// Wrong token.
	if code, _, errOut := call(t, "ctl", "--addr", url, "--token", "bad", "stats"); code != exitError || !strings.Contains(errOut, "401") {
		t.Errorf("bad token: %d %q", code, errOut)
	}
}

func TestCtlTargetFromConfig(t *testing.T) {
	_, url := startAdmin(t, "from-config")
	hostport := strings.TrimPrefix(url, "http://")
	_, port, _ := strings.Cut(hostport, ":")

	// From the environment the bridge itself reads; 0.0.0.0 is reached on loopback.
	environ = func() []string {
		return []string{"DELAYBRIDGE_ADMIN__LISTEN=0.0.0.0:" + port, "DELAYBRIDGE_ADMIN__TOKEN=from-config"}
	}
	defer func() { environ = func() []string { return []string{} } }()
	if code, _, errOut := call(t, "ctl", "stats"); code != exitOK {
		t.Errorf("ctl from env: %d %q", code, errOut)
	}
	// From the configuration file (the environment still applies, as for run).
	environ = func() []string { return []string{} }
	file := writeConfig(t, "admin: {listen: \""+hostport+"\", token: from-config}\n")
	if code, _, errOut := call(t, "ctl", "-c", file, "stats"); code != exitOK {
		t.Errorf("ctl -c: %d %q", code, errOut)
	}
	// --token wins over the file.
	if code, _, _ := call(t, "ctl", "-c", file, "--token", "other", "stats"); code != exitError {
		t.Errorf("--token override: %d", code)
	}
	if code, _, errOut := call(t, "ctl", "-c", writeConfig(t, "admin: {listen: \"\"}\n"), "stats"); code != exitError || !strings.Contains(errOut, "disabled") {
		t.Errorf("disabled admin: %d %q", code, errOut)
	}
}

func (b *ctlBackend) PreviewJob(_ context.Context, spec admin.JobSpec, sample int) (admin.JobPreview, error) {
	p := admin.JobPreview{DryRun: true, Spec: spec, Matched: 3}
	for i := range min(sample, 3) {
		p.Sample = append(p.Sample, admin.Message{ID: fmt.Sprintf("p%d", i+1), State: admin.StatePending, Route: "orders", DueAt: 5000})
	}
	return p, nil
}

func (b *ctlBackend) StartJob(_ context.Context, spec admin.JobSpec) (admin.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.jobs = append(b.jobs, spec)
	b.lastJob = &spec
	return admin.Job{ID: "j1", Spec: spec, State: admin.JobQueued, Matched: 3, CreatedAt: 1000, UpdatedAt: 1000}, nil
}

func (b *ctlBackend) GetJob(_ context.Context, id string) (admin.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id != "j1" || b.lastJob == nil {
		return admin.Job{}, fmt.Errorf("no job %q: %w", id, admin.ErrNotFound)
	}
	return admin.Job{ID: "j1", Spec: *b.lastJob, State: admin.JobDone, Matched: 3, Done: 3, CreatedAt: 1000, UpdatedAt: 2000, Instance: "pod-a-1"}, nil
}

func (b *ctlBackend) ListJobs(ctx context.Context, _ int) ([]admin.Job, error) {
	j, err := b.GetJob(ctx, "j1")
	if err != nil {
		return nil, nil
	}
	return []admin.Job{j}, nil
}

// startedJobs returns the jobs started so far and forgets them.
func (b *ctlBackend) startedJobs() []admin.JobSpec {
	b.mu.Lock()
	defer b.mu.Unlock()
	j := b.jobs
	b.jobs = nil
	return j
}
