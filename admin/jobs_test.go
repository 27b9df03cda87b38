package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestJobs(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "")
	seed(f, "billing", 5, 2_000_000_000_000)

	// Dry run: count and sample, nothing changed.
	r := do(t, s, "POST", "/v1/jobs", `{"kind":"cancel","filter":{"route":"billing","id_prefix":"billing-p0"},"dry_run":true,"sample":2}`)
	r.expect(t, http.StatusOK, "dry_run", "spec", "matched", "sample")
	var p JobPreview
	if err := json.Unmarshal([]byte(r.raw), &p); err != nil {
		t.Fatal(err)
	}
	if p.Matched != 5 || len(p.Sample) != 2 || p.Sample[0].ID != "billing-p00" || p.Spec.Filter.State != StatePending {
		t.Errorf("preview = %+v", p)
	}
	if f.msgs["billing-p00"].State != StatePending {
		t.Error("a dry run changed a message")
	}

	// The job: 202, Location, then its state.
	r = do(t, s, "POST", "/v1/jobs", `{"kind":"reschedule","filter":{"route":"billing","due_to":"2033-05-18T03:33:22Z"},"shift_ms":60000}`)
	r.expect(t, http.StatusAccepted, "id", "spec", "state", "matched", "done", "failed", "created_at", "updated_at")
	id, _ := r.body["id"].(string)
	if r.header.Get("Location") != "/v1/jobs/"+id || r.body["state"] != JobQueued {
		t.Errorf("202: %s (Location %q)", r.raw, r.header.Get("Location"))
	}
	r = do(t, s, "GET", "/v1/jobs/"+id, "")
	r.expect(t, http.StatusOK, "state")
	if r.body["state"] != JobDone || r.body["matched"] != float64(2) || r.body["done"] != float64(2) {
		t.Errorf("job: %s", r.raw)
	}
	if f.msgs["billing-p01"].DueAt != 2_000_000_061_000 || f.msgs["billing-p02"].DueAt != 2_000_000_002_000 {
		t.Errorf("reschedule by shift: p01 %d, p02 %d", f.msgs["billing-p01"].DueAt, f.msgs["billing-p02"].DueAt)
	}
	do(t, s, "POST", "/v1/jobs", `{"kind":"purge_dead","filter":{"route":"orders"}}`).expect(t, http.StatusAccepted)
	r = do(t, s, "GET", "/v1/jobs?limit=1", "")
	r.expect(t, http.StatusOK, "jobs")
	if jobs := r.body["jobs"].([]any); len(jobs) != 1 || jobs[0].(map[string]any)["spec"].(map[string]any)["kind"] != JobPurgeDead {
		t.Errorf("jobs: %s", r.raw)
	}
	do(t, s, "GET", "/v1/jobs/nope", "").expectError(t, http.StatusNotFound, "", "not found")

	bad := []struct{ body, field, contains string }{
		{`{}`, "kind", "is required"},
		{`{"kind":"explode"}`, "kind", "want one of cancel, reschedule, requeue_dead, purge_dead"},
		{`{"kind":"cancel","filter":{"state":"inflight"}}`, "filter.state", "pending or dead"},
		{`{"kind":"requeue_dead","filter":{"state":"pending"}}`, "filter.state", "works on dead"},
		{`{"kind":"cancel","filter":{"colour":"red"}}`, "filter.colour", "unknown field"},
		{`{"kind":"cancel","filter":{"due_from":"soon"}}`, "filter.due_from", "RFC 3339"},
		{`{"kind":"cancel","filter":{"due_from":2000000005000,"due_to":2000000001000}}`, "filter.due_to", "after due_from"},
		{`{"kind":"cancel","filter":{"route":"nope"}}`, "route", "no route named"},
		{`{"kind":"cancel","shift_ms":5}`, "shift_ms", "only for kind reschedule"},
		{`{"kind":"purge_dead","deliver_at":2000000000000}`, "deliver_at", "only for kind reschedule"},
		{`{"kind":"reschedule"}`, "deliver_at", "needs deliver_at or shift_ms"},
		{`{"kind":"reschedule","shift_ms":0}`, "shift_ms", "must not be 0"},
		{`{"kind":"reschedule","shift_ms":1,"deliver_at":2000000000000}`, "deliver_at", "only one"},
		{`{"kind":"reschedule","shift_ms":999999999999999}`, "shift_ms", "10 years"},
		{`{"kind":"cancel","sample":3}`, "sample", "only with dry_run"},
		{`{"kind":"cancel","dry_run":true,"sample":101}`, "sample", "want 0 to 100"},
		{`{"kind":"cancel","dryrun":true}`, "dryrun", "unknown field"},
	}
	for _, c := range bad {
		t.Run(c.body, func(t *testing.T) {
			do(t, s, "POST", "/v1/jobs", c.body).expectError(t, http.StatusBadRequest, c.field, c.contains)
		})
	}
	do(t, s, "GET", "/v1/jobs?limit=101", "").expectError(t, http.StatusBadRequest, "limit", "between 1 and 100")
}

// A backend that does not browse or run jobs yet answers 501 with a clear message, and
// the client reports ErrNotImplemented: nothing silently succeeds.
func TestNotImplementedIs501(t *testing.T) {
	s := NewServer(Options{Backend: coreOnly{f: newFake()}, Logger: quiet})
	for _, rq := range [][3]string{
		{"GET", "/v1/messages", ""},
		{"GET", "/v1/dead", ""},
		{"DELETE", "/v1/dead", ""},
		{"POST", "/v1/jobs", `{"kind":"cancel","dry_run":true}`},
		{"POST", "/v1/jobs", `{"kind":"cancel"}`},
		{"GET", "/v1/jobs", ""},
		{"GET", "/v1/jobs/j1", ""},
		{"GET", "/v1/lateness", ""}, // no Gatherer
	} {
		r := do(t, s, rq[0], rq[1], rq[2])
		r.expectError(t, http.StatusNotImplemented, "", "not ")
		if msg := r.body["error"].(string); !strings.Contains(msg, "not implemented") {
			t.Errorf("%s %s: %q does not say it is not implemented", rq[0], rq[1], msg)
		}
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	if _, err := NewClient(ts.URL, "", nil).Browse(context.Background(), Query{}); !errors.Is(err, ErrNotImplemented) {
		t.Errorf("client: %v", err)
	}
}

// coreOnly is a Backend with the core methods of a fakeBackend and Unimplemented for
// browsing and jobs (as a Backend that does not do them yet would embed it).
type coreOnly struct {
	Unimplemented
	f *fakeBackend
}

var _ Backend = coreOnly{}

func (c coreOnly) Schedule(ctx context.Context, r ScheduleRequest) (Scheduled, error) {
	return c.f.Schedule(ctx, r)
}
func (c coreOnly) Get(ctx context.Context, id string) (Message, error)   { return c.f.Get(ctx, id) }
func (c coreOnly) Cancel(ctx context.Context, id string) (string, error) { return c.f.Cancel(ctx, id) }
func (c coreOnly) Reschedule(ctx context.Context, id string, w When) (Scheduled, error) {
	return c.f.Reschedule(ctx, id, w)
}
func (c coreOnly) Stats(ctx context.Context) (Stats, error) { return c.f.Stats(ctx) }
func (c coreOnly) RequeueDead(ctx context.Context, id string) (Scheduled, error) {
	return c.f.RequeueDead(ctx, id)
}
func (c coreOnly) Ready(ctx context.Context) error { return c.f.Ready(ctx) }

// The console's files and the OpenAPI document are served without the token (they hold
// no data); the API behind them is not.
func TestConsoleAssetsOpen(t *testing.T) {
	s := newTestServer(newFake(), "tok")
	r := do(t, s, "GET", "/ui/", "")
	if r.status != http.StatusOK || !strings.Contains(r.raw, "<title>delay-bridge console</title>") ||
		!strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("/ui/ = %d %q %.200s", r.status, r.header, r.raw)
	}
	for _, f := range []string{"app.js", "api.js", "ui.js", "overview.js", "browse.js", "message.js", "jobs.js"} {
		r := do(t, s, "GET", "/ui/"+f, "")
		if r.status != http.StatusOK || !strings.Contains(r.header.Get("Content-Type"), "javascript") {
			t.Errorf("/ui/%s = %d %q", f, r.status, r.header.Get("Content-Type"))
		}
	}
	if r := do(t, s, "GET", "/ui/style.css", ""); r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/css") {
		t.Errorf("style.css = %d %q", r.status, r.header.Get("Content-Type"))
	}
	if r := do(t, s, "GET", "/", ""); r.status != http.StatusFound || r.header.Get("Location") != "/ui/" {
		t.Errorf("/ = %d %q", r.status, r.header.Get("Location"))
	}
	if r := do(t, s, "GET", "/v1/openapi.json", ""); r.status != http.StatusOK || r.body["openapi"] != "3.0.3" {
		t.Errorf("openapi.json = %d %.100s", r.status, r.raw)
	}
	do(t, s, "GET", "/v1/messages", "").expectError(t, http.StatusUnauthorized, "", "bearer")
	do(t, s, "GET", "/v1/jobs", "").expectError(t, http.StatusUnauthorized, "", "bearer")
}
