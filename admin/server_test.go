package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// ---- helpers -----------------------------------------------------------------------

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func do(t *testing.T, h http.Handler, method, path, body string, hdr ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := response{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	if ct := rec.Header().Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		if err := json.Unmarshal(rec.Body.Bytes(), &res.body); err != nil {
			t.Fatalf("%s %s: body is not a JSON object: %v\n%s", method, path, err, rec.Body.String())
		}
	}
	return res
}

func (r response) expect(t *testing.T, status int, keys ...string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.raw)
	}
	if r.body == nil {
		t.Fatalf("no JSON body: %q (Content-Type %q)", r.raw, r.header.Get("Content-Type"))
	}
	for _, k := range keys {
		if _, ok := r.body[k]; !ok {
			t.Errorf("JSON body lacks %q: %s", k, r.raw)
		}
	}
}

// expectError checks a JSON error answer and, when field != "", its field.
func (r response) expectError(t *testing.T, status int, field string, contains string) {
	t.Helper()
	r.expect(t, status, "error")
	if msg, _ := r.body["error"].(string); !strings.Contains(msg, contains) {
		t.Errorf("error %q does not contain %q", msg, contains)
	}
	if got, _ := r.body["field"].(string); got != field {
		t.Errorf("field = %q, want %q (body %s)", got, field, r.raw)
	}
}

func newTestServer(f *fakeBackend, token string) *Server {
	reg := prometheus.NewRegistry()
	// The HTTP layer serves whatever the Gatherer holds; the real collectors live in
	// app/metrics (tested there).
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "delaybridge_build_info"}))
	return NewServer(Options{Backend: f, Token: token, Gatherer: reg, Logger: quiet, MaxBodyBytes: 1024})
}

// ---- tests -------------------------------------------------------------------------

func TestAuth(t *testing.T) {
	s := newTestServer(newFake(), "s3cret")
	for _, p := range []string{"/v1/stats", "/v1/messages/m1", "/v1/dead", "/nope"} {
		r := do(t, s, "GET", p, "")
		r.expectError(t, http.StatusUnauthorized, "", "bearer token")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", p)
		}
		do(t, s, "GET", p, "", "Authorization", "Bearer wrong").expectError(t, http.StatusUnauthorized, "", "bearer")
		do(t, s, "GET", p, "", "Authorization", "Basic czNjcmV0").expectError(t, http.StatusUnauthorized, "", "bearer")
		do(t, s, "GET", p, "", "Authorization", "s3cret").expectError(t, http.StatusUnauthorized, "", "bearer")
	}
	do(t, s, "POST", "/v1/messages", `{"route":"orders","delay_ms":1}`).expect(t, http.StatusUnauthorized)
	do(t, s, "GET", "/v1/stats", "", "Authorization", "Bearer s3cret").expect(t, http.StatusOK, "totals")
	do(t, s, "GET", "/v1/stats", "", "Authorization", "bearer s3cret").expect(t, http.StatusOK, "totals")

	// Probes and the scraper need no token.
	do(t, s, "GET", "/healthz", "").expect(t, http.StatusOK, "status")
	do(t, s, "GET", "/readyz", "").expect(t, http.StatusOK, "status")
	if r := do(t, s, "GET", "/metrics", ""); r.status != http.StatusOK || !strings.Contains(r.raw, "delaybridge_build_info") {
		t.Errorf("/metrics = %d %.200s", r.status, r.raw)
	}

	// No token configured: everything is open.
	open := newTestServer(newFake(), "")
	do(t, open, "GET", "/v1/stats", "").expect(t, http.StatusOK)
}

func TestSchedule(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "")

	r := do(t, s, "POST", "/v1/messages",
		`{"id":"a1","route":"orders","key":"k","payload":"hello","headers":{"traceparent":"00-1"},"delay_ms":5000}`)
	r.expect(t, http.StatusCreated, "id", "due_at")
	if r.body["id"] != "a1" || r.body["due_at"] != float64(1_700_000_005_000) {
		t.Errorf("body = %s", r.raw)
	}
	if _, ok := r.body["duplicate"]; ok {
		t.Errorf("a new message must not say duplicate: %s", r.raw)
	}
	if loc := r.header.Get("Location"); loc != "/v1/messages/a1" {
		t.Errorf("Location = %q", loc)
	}
	want := ScheduleRequest{ID: "a1", Route: "orders", Key: []byte("k"), Payload: []byte("hello"),
		Headers: map[string]string{"traceparent": "00-1"}, When: When{Delay: 5 * time.Second}}
	if !reflect.DeepEqual(f.lastReq, want) {
		t.Errorf("backend got %+v, want %+v", f.lastReq, want)
	}

	// Same id again: 200 and duplicate.
	r = do(t, s, "POST", "/v1/messages", `{"id":"a1","route":"orders","delay_ms":1}`)
	r.expect(t, http.StatusOK, "id", "due_at", "duplicate")

	// deliver_at as unix ms, as a numeric string and as RFC 3339; payload and key in base64.
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, da := range []string{fmt.Sprint(at.UnixMilli()), fmt.Sprintf("%q", fmt.Sprint(at.UnixMilli())), `"2030-01-02T03:04:05Z"`} {
		r = do(t, s, "POST", "/v1/messages", `{"route":"orders","payload_base64":"AAEC","key_base64":"/w==","deliver_at":`+da+`}`)
		r.expect(t, http.StatusCreated, "id", "due_at")
		if r.body["due_at"] != float64(at.UnixMilli()) || !f.lastReq.When.DeliverAt.Equal(at) {
			t.Errorf("deliver_at %s: body %s, backend %v", da, r.raw, f.lastReq.When)
		}
		if string(f.lastReq.Payload) != "\x00\x01\x02" || string(f.lastReq.Key) != "\xff" || f.lastReq.ID != "" {
			t.Errorf("backend got %+v", f.lastReq)
		}
	}
	// No payload at all is an empty payload, not an error.
	do(t, s, "POST", "/v1/messages", `{"route":"orders","delay_ms":0}`).expect(t, http.StatusCreated)
	if f.lastReq.Payload == nil || len(f.lastReq.Payload) != 0 {
		t.Errorf("payload = %#v", f.lastReq.Payload)
	}

	bad := []struct{ body, field, contains string }{
		{`{"delay_ms":1}`, "route", "required"},
		{`{"route":"orders"}`, "delay_ms", "one of delay_ms or deliver_at"},
		{`{"route":"orders","delay_ms":1,"deliver_at":1700000000000}`, "delay_ms", "only one"},
		{`{"route":"orders","delay_ms":1.5}`, "delay_ms", "delay_ms"},
		{`{"route":"orders","delay_ms":"5s"}`, "delay_ms", "delay_ms"},
		{`{"route":"orders","deliver_at":"tomorrow"}`, "deliver_at", "RFC 3339"},
		{`{"route":"orders","deliver_at":true}`, "deliver_at", "unix milliseconds"},
		{`{"route":"orders","delay_ms":1,"payload":"x","payload_base64":"eA=="}`, "payload", "only one"},
		{`{"route":"orders","delay_ms":1,"payload_base64":"%%%"}`, "payload_base64", "base64"},
		{`{"route":"orders","delay_ms":1,"key":"x","key_base64":"eA=="}`, "key", "only one"},
		{`{"route":"orders","delay_ms":1,"colour":"red"}`, "colour", "unknown field"},
		{`{"route":"orders","delay_ms":1,"headers":{"a":1}}`, "headers", "headers"},
		{`{"route":"nope","delay_ms":1}`, "route", "unknown route"},                    // from the Backend
		{`{"route":"orders","delay_ms":34560000000}`, "delay_ms", "limits.max_delay"},  // from the Backend
		{`{"route":"orders","delay_ms":9223372036854775807}`, "delay_ms", "too large"}, // overflow guard
		{`{"route":"orders","delay_ms":1} {}`, "", "trailing data"},
		{`{"route":`, "", "JSON"},
		{``, "", "empty request body"},
		{`[1]`, "", "want a JSON object, got array"},
	}
	for _, c := range bad {
		t.Run(c.body, func(t *testing.T) {
			do(t, s, "POST", "/v1/messages", c.body).expectError(t, http.StatusBadRequest, c.field, c.contains)
		})
	}

	big := `{"route":"orders","delay_ms":1,"payload":"` + strings.Repeat("x", 2000) + `"}`
	do(t, s, "POST", "/v1/messages", big).expectError(t, http.StatusRequestEntityTooLarge, "", "larger than 1024")
}

func TestBackendErrorsMapToStatus(t *testing.T) {
	cases := []struct {
		err    error
		status int
	}{
		{fmt.Errorf("redis: %w", ErrUnavailable), http.StatusServiceUnavailable},
		{context.DeadlineExceeded, http.StatusServiceUnavailable},
		{errors.New("boom"), http.StatusInternalServerError},
		{fmt.Errorf("x: %w", ErrConflict), http.StatusConflict},
	}
	for _, c := range cases {
		f := newFake()
		f.failWith = c.err
		s := newTestServer(f, "")
		for _, rq := range [][3]string{
			{"POST", "/v1/messages", `{"route":"orders","delay_ms":1}`},
			{"GET", "/v1/messages/m1", ""},
			{"DELETE", "/v1/messages/m1", ""},
			{"POST", "/v1/messages/m1/reschedule", `{"delay_ms":1}`},
			{"GET", "/v1/stats", ""},
			{"GET", "/v1/dead", ""},
			{"POST", "/v1/dead/d1/requeue", ""},
			{"DELETE", "/v1/dead", ""},
		} {
			r := do(t, s, rq[0], rq[1], rq[2])
			if r.status != c.status {
				t.Errorf("%v: %s %s = %d, want %d", c.err, rq[0], rq[1], r.status, c.status)
			}
			r.expect(t, c.status, "error")
		}
	}
}

func TestGet(t *testing.T) {
	s := newTestServer(newFake(), "")
	r := do(t, s, "GET", "/v1/messages/m1", "")
	r.expect(t, http.StatusOK, "id", "state", "due_at", "route", "source", "attempt", "headers", "payload_size")
	if r.body["state"] != StatePending || r.body["route"] != "orders" || r.body["source"] != "orders.delay" {
		t.Errorf("body = %s", r.raw)
	}
	if _, ok := r.body["reason"]; ok {
		t.Errorf("reason must be omitted when empty: %s", r.raw)
	}
	r = do(t, s, "GET", "/v1/messages/d1", "")
	r.expect(t, http.StatusOK, "reason", "dead_at")
	if r.body["state"] != StateDead || r.body["reason"] != "bad_delay" {
		t.Errorf("dead: %s", r.raw)
	}
	// A delivered message has only id and state (its envelope is gone).
	r = do(t, s, "GET", "/v1/messages/gone", "")
	r.expect(t, http.StatusOK, "id", "state")
	if r.body["state"] != StateDelivered {
		t.Errorf("delivered: %s", r.raw)
	}
	do(t, s, "GET", "/v1/messages/nope", "").expectError(t, http.StatusNotFound, "", "not found")

	// Ids derived from Kafka positions contain slashes: encoded or not.
	for _, p := range []string{"/v1/messages/orders.delay%2F0%2F42", "/v1/messages/orders.delay/0/42"} {
		r = do(t, s, "GET", p, "")
		r.expect(t, http.StatusOK)
		if r.body["id"] != "orders.delay/0/42" {
			t.Errorf("%s: %s", p, r.raw)
		}
	}
}

func TestCancel(t *testing.T) {
	s := newTestServer(newFake(), "")
	r := do(t, s, "DELETE", "/v1/messages/m1", "")
	r.expect(t, http.StatusOK, "id", "prior_state")
	if r.body["id"] != "m1" || r.body["prior_state"] != StatePending {
		t.Errorf("body = %s", r.raw)
	}
	r = do(t, s, "DELETE", "/v1/messages/fly", "")
	r.expect(t, http.StatusOK)
	if r.body["prior_state"] != StateInflight {
		t.Errorf("inflight: %s", r.raw)
	}
	r = do(t, s, "DELETE", "/v1/messages/m1", "")
	r.expectError(t, http.StatusConflict, "", "already cancelled")
	if r.body["prior_state"] != StateCancelled || r.body["id"] != "m1" {
		t.Errorf("409 of a cancelled message: %s, want prior_state cancelled", r.raw)
	}
	r = do(t, s, "DELETE", "/v1/messages/gone", "")
	r.expectError(t, http.StatusConflict, "", "already delivered")
	if r.body["prior_state"] != StateDelivered {
		t.Errorf("409 of a delivered message: %s, want prior_state delivered", r.raw)
	}
	do(t, s, "DELETE", "/v1/messages/nope", "").expectError(t, http.StatusNotFound, "", "not found")
	r = do(t, s, "DELETE", "/v1/messages/orders.delay%2F0%2F42", "")
	r.expect(t, http.StatusOK)
	if r.body["id"] != "orders.delay/0/42" {
		t.Errorf("slash id: %s", r.raw)
	}
}

func TestReschedule(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "")
	r := do(t, s, "POST", "/v1/messages/m1/reschedule", `{"delay_ms":2500}`)
	r.expect(t, http.StatusOK, "id", "due_at")
	if r.body["due_at"] != float64(1_700_000_002_500) || f.lastWhen != (When{Delay: 2500 * time.Millisecond}) {
		t.Errorf("body %s, backend %+v", r.raw, f.lastWhen)
	}
	r = do(t, s, "POST", "/v1/messages/m1/reschedule", `{"deliver_at":"2030-01-02T03:04:05.5Z"}`)
	r.expect(t, http.StatusOK)
	if r.body["due_at"] != float64(time.Date(2030, 1, 2, 3, 4, 5, 5e8, time.UTC).UnixMilli()) {
		t.Errorf("body %s", r.raw)
	}
	do(t, s, "POST", "/v1/messages/orders.delay%2F0%2F42/reschedule", `{"delay_ms":1}`).expect(t, http.StatusOK)
	do(t, s, "POST", "/v1/messages/fly/reschedule", `{"delay_ms":1}`).expectError(t, http.StatusConflict, "", "inflight")
	do(t, s, "POST", "/v1/messages/nope/reschedule", `{"delay_ms":1}`).expectError(t, http.StatusNotFound, "", "not found")
	do(t, s, "POST", "/v1/messages/m1/reschedule", `{}`).expectError(t, http.StatusBadRequest, "delay_ms", "required")
	do(t, s, "POST", "/v1/messages/m1/reschedule", `{"delay_ms":1,"route":"x"}`).expectError(t, http.StatusBadRequest, "route", "unknown field")
}

func TestStats(t *testing.T) {
	s := newTestServer(newFake(), "")
	r := do(t, s, "GET", "/v1/stats", "")
	r.expect(t, http.StatusOK, "totals", "shards", "routes", "instance", "members")
	var st Stats
	if err := json.Unmarshal([]byte(r.raw), &st); err != nil {
		t.Fatal(err)
	}
	if st.Totals.Pending != 3 || len(st.Shards) != 2 || st.Shards[0].Owner != "a-1" || st.Shards[0].NextDue != 1 {
		t.Errorf("stats = %+v", st)
	}
	shard0 := r.body["shards"].([]any)[0].(map[string]any)
	for _, k := range []string{"shard", "pending", "inflight", "dead", "next_due", "owner"} {
		if _, ok := shard0[k]; !ok {
			t.Errorf("shard JSON lacks %q: %v", k, shard0)
		}
	}
}

func TestDead(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "")
	r := do(t, s, "GET", "/v1/dead", "")
	r.expect(t, http.StatusOK, "messages", "count")
	if f.lastLim != DefaultDeadLimit || r.body["count"] != float64(1) {
		t.Errorf("limit %d, body %s", f.lastLim, r.raw)
	}
	do(t, s, "GET", "/v1/dead?limit=7", "").expect(t, http.StatusOK)
	if f.lastLim != 7 {
		t.Errorf("limit = %d", f.lastLim)
	}
	for _, l := range []string{"0", "-1", "x", "1001"} {
		do(t, s, "GET", "/v1/dead?limit="+l, "").expectError(t, http.StatusBadRequest, "limit", "between 1 and 1000")
	}

	r = do(t, s, "POST", "/v1/dead/d1/requeue", "")
	r.expect(t, http.StatusOK, "id", "due_at")
	do(t, s, "POST", "/v1/dead/d1/requeue", "").expectError(t, http.StatusNotFound, "", "not found")
	do(t, s, "POST", "/v1/dead/m1/requeue", "").expectError(t, http.StatusNotFound, "", "not found")

	f.msgs["d2"] = &Message{ID: "d2", State: StateDead}
	f.msgs["d3"] = &Message{ID: "d3", State: StateDead}
	r = do(t, s, "DELETE", "/v1/dead", "")
	r.expect(t, http.StatusOK, "purged")
	if r.body["purged"] != float64(2) {
		t.Errorf("purge: %s", r.raw)
	}
	r = do(t, s, "GET", "/v1/dead", "")
	if msgs, ok := r.body["messages"].([]any); !ok || len(msgs) != 0 {
		t.Errorf("empty list must be [] not null: %s", r.raw)
	}
}

func TestHealthAndReady(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "")
	do(t, s, "GET", "/healthz", "").expect(t, http.StatusOK, "status")
	do(t, s, "GET", "/readyz", "").expect(t, http.StatusOK, "status")
	f.notReady = errors.New("redis: connection refused")
	r := do(t, s, "GET", "/readyz", "")
	r.expect(t, http.StatusServiceUnavailable, "status", "error")
	if r.body["error"] != "redis: connection refused" {
		t.Errorf("readyz: %s", r.raw)
	}
	// Liveness does not depend on readiness.
	do(t, s, "GET", "/healthz", "").expect(t, http.StatusOK)
}

func TestUnknownRoutesAreJSON(t *testing.T) {
	s := newTestServer(newFake(), "")
	do(t, s, "GET", "/v2/nothing", "").expectError(t, http.StatusNotFound, "", "not found")
	r := do(t, s, "PUT", "/v1/stats", "")
	r.expectError(t, http.StatusMethodNotAllowed, "", "method not allowed")
	if !strings.Contains(r.header.Get("Allow"), "GET") {
		t.Errorf("Allow = %q", r.header.Get("Allow"))
	}
	do(t, s, "PUT", "/v1/messages", "").expectError(t, http.StatusMethodNotAllowed, "", "method not allowed") // GET is browse
	do(t, s, "GET", "/v1/messages/", "").expectError(t, http.StatusNotFound, "", "no message id")
	do(t, s, "DELETE", "/v1/messages/", "").expectError(t, http.StatusNotFound, "", "no message id")
}

// Serve answers on a real listener and, when its context ends, lets a request in
// progress finish before returning.
func TestServeGracefulShutdown(t *testing.T) {
	f := newFake()
	f.block = make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Options{Backend: f, Logger: quiet, ShutdownTimeout: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()

	base := "http://" + ln.Addr().String()
	c := NewClient(base, "", nil)
	if err := c.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := c.Stats(context.Background())
		slow <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the stats request reach the backend
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) while a request was in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(f.block)
	if err := <-slow; err != nil {
		t.Errorf("in-progress request failed: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve = %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("still serving after shutdown")
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestRunBadAddress(t *testing.T) {
	s := NewServer(Options{Backend: newFake(), Logger: quiet, Addr: "256.0.0.1:99999"})
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Run = %v", err)
	}
}
