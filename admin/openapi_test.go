package admin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
}

// loadOpenAPI loads /v1/openapi.json as served and validates the document itself.
func loadOpenAPI(t *testing.T, h http.Handler) (*openapi3.T, routers.Router) {
	t.Helper()
	r := do(t, h, "GET", "/v1/openapi.json", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json = %d %s", r.status, r.raw)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(r.raw))
	if err != nil {
		t.Fatalf("loading the OpenAPI document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the OpenAPI document is invalid: %v", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

type apiCall struct {
	srv          string // which server: ok, fail503, fail500, unimpl
	method, path string
	body         string
	auth         bool // send the right token
	status       int
}

// TestOpenAPIConformance calls every endpoint on the real Server type (success and error
// paths) and validates each request and each real response — status, headers, body,
// error bodies — against the served document; it fails when an endpoint of the mux is
// missing from the document or an operation of the document is never called.
func TestOpenAPIConformance(t *testing.T) {
	servers, okSrv := conformanceServers()
	doc, router := loadOpenAPI(t, okSrv)
	called := map[string]bool{} // "METHOD /doc/path" of every call that reached the document

	for _, c := range openAPICalls() {
		name := c.srv + " " + c.method + " " + c.path
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if c.auth {
				req.Header.Set("Authorization", "Bearer tok")
			}
			rec := httptest.NewRecorder()
			servers[c.srv].ServeHTTP(rec, req)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body.String())
			}
			route, params, err := router.FindRoute(req)
			if err != nil {
				t.Fatalf("not in the document: %v", err)
			}
			called[c.method+" "+route.Path] = true
			in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
			// The request is checked against the document only when the server accepted
			// it: the 400 cases send what the document forbids on purpose.
			if c.status < 400 {
				req.Body = io.NopCloser(strings.NewReader(c.body))
				if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
					t.Errorf("request does not conform: %v", err)
				}
			}
			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code,
				Header: rec.Header(), Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
				Options: &openapi3filter.Options{IncludeResponseStatus: true}}
			if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
				t.Errorf("response does not conform: %v\n%s", err, rec.Body.String())
			}
		})
	}

	// Every mux pattern is documented, and every documented operation was called.
	wildcard := regexp.MustCompile(`\{(\w+)\.\.\.\}`)
	for _, p := range okSrv.patterns {
		method, path, _ := strings.Cut(p, " ")
		path = wildcard.ReplaceAllString(strings.TrimSuffix(path, "{$}"), "{$1}")
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("mux pattern %q (%s %s) is missing from the OpenAPI document", p, method, path)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !called[method+" "+path] {
				t.Errorf("%s %s is documented but the test never calls it", method, path)
			}
		}
	}
}

// conformanceServers are the servers the calls go to: ok (a working backend with routes
// and lateness), fail503 and fail500 (every backend call fails), unimpl (no browsing or
// jobs, no metrics), notready.
func conformanceServers() (map[string]http.Handler, *Server) {
	servers := map[string]http.Handler{}
	ok := &routesFake{fakeBackend: newFake(), routes: RoutesResponse{Instance: "a-1", Routes: []RouteStatus{{
		Name:    "orders",
		Ingress: IngressStatus{Source: "kafka:orders.delay", State: "consuming", Partitions: []int{0}, Lag: 3},
		Egress:  EgressStatus{Broker: "kafka", Target: "orders", Reachable: true},
		Ready:   true, Counts: &Counts{Pending: 3, Inflight: 1, Dead: 1}, NextDue: 1_700_000_005_000,
	}}}}
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: LatenessMetric, Buckets: []float64{0.001, 0.01}}, []string{"route"})
	reg.MustRegister(h)
	h.WithLabelValues("orders").Observe(0.004)
	h.WithLabelValues("billing")
	okSrv := NewServer(Options{Backend: ok, Token: "tok", Gatherer: reg, Logger: quiet, MaxBodyBytes: 1024})
	servers["ok"] = okSrv
	for name, err := range map[string]error{"fail503": ErrUnavailable, "fail500": errors.New("boom")} {
		f := &routesFake{fakeBackend: newFake()}
		f.failWith = err
		servers[name] = NewServer(Options{Backend: f, Token: "tok", Gatherer: reg, Logger: quiet})
	}
	servers["unimpl"] = NewServer(Options{Backend: coreOnly{f: newFake()}, Token: "tok", Logger: quiet})
	notReady := newFake()
	notReady.notReady = &NotReadyError{Checks: []Check{{Name: "redis", OK: false, Detail: "refused"}}}
	servers["notready"] = NewServer(Options{Backend: notReady, Logger: quiet})

	return servers, okSrv
}

func openAPICalls() []apiCall {
	const sched = `{"id":"n1","route":"orders","payload":"hi","headers":{"a":"b"},"delay_ms":1000}`
	return []apiCall{
		{"ok", "POST", "/v1/messages", sched, true, 201},
		{"ok", "POST", "/v1/messages", sched, true, 200},
		{"ok", "POST", "/v1/messages", `{"route":"orders"}`, true, 400},
		{"ok", "POST", "/v1/messages", `{"route":"orders","delay_ms":1,"payload":"` + strings.Repeat("x", 2000) + `"}`, true, 413},
		{"ok", "POST", "/v1/messages", sched, false, 401},
		{"fail503", "POST", "/v1/messages", sched, true, 503},
		{"fail500", "POST", "/v1/messages", sched, true, 500},
		{"ok", "GET", "/v1/messages?route=orders&limit=1", "", true, 200},
		{"ok", "GET", "/v1/messages?state=inflight&due_from=2023-11-14T22:13:20Z&id_prefix=f&key_prefix=k", "", true, 200},
		{"ok", "GET", "/v1/messages?state=bogus", "", true, 400},
		{"ok", "GET", "/v1/messages?colour=red", "", true, 400},
		{"unimpl", "GET", "/v1/messages", "", true, 501},
		{"fail503", "GET", "/v1/messages", "", true, 503},
		{"ok", "GET", "/v1/messages/m1", "", true, 200},
		{"ok", "GET", "/v1/messages/d1", "", true, 200},
		{"ok", "GET", "/v1/messages/gone", "", true, 200},
		{"ok", "GET", "/v1/messages/orders.delay%2F0%2F42", "", true, 200},
		{"ok", "GET", "/v1/messages/nope", "", true, 404},
		{"ok", "GET", "/v1/messages/m1?x=1", "", true, 400},
		{"fail500", "GET", "/v1/messages/m1", "", true, 500},
		{"ok", "POST", "/v1/messages/m1/reschedule", `{"deliver_at":"2030-01-01T00:00:00Z"}`, true, 200},
		{"ok", "POST", "/v1/messages/m1/reschedule", `{}`, true, 400},
		{"ok", "POST", "/v1/messages/fly/reschedule", `{"delay_ms":5}`, true, 409},
		{"ok", "POST", "/v1/messages/nope/reschedule", `{"delay_ms":5}`, true, 404},
		{"fail503", "POST", "/v1/messages/m1/reschedule", `{"delay_ms":5}`, true, 503},
		{"ok", "DELETE", "/v1/messages/m1", "", true, 200},
		{"ok", "DELETE", "/v1/messages/m1", "", true, 409},
		{"ok", "DELETE", "/v1/messages/nope", "", true, 404},
		{"fail500", "DELETE", "/v1/messages/m1", "", true, 500},
		{"ok", "GET", "/v1/keys/orders/cust-7", "", true, 200},
		{"ok", "GET", "/v1/keys/orders/no%2Fsuch", "", true, 200},
		{"ok", "GET", "/v1/keys/payments/cust-7", "", true, 400},
		{"ok", "GET", "/v1/keys/orders/cust-7?x=1", "", true, 400},
		{"unimpl", "GET", "/v1/keys/orders/cust-7", "", true, 501},
		{"fail503", "GET", "/v1/keys/orders/cust-7", "", true, 503},
		{"fail500", "GET", "/v1/keys/orders/cust-7", "", true, 500},
		{"ok", "GET", "/v1/keys/orders/cust-7", "", false, 401},
		{"ok", "DELETE", "/v1/keys/orders/cust-7", "", true, 200},
		{"ok", "DELETE", "/v1/keys/payments/cust-7", "", true, 400},
		{"unimpl", "DELETE", "/v1/keys/orders/cust-7", "", true, 501},
		{"fail503", "DELETE", "/v1/keys/orders/cust-7", "", true, 503},
		{"fail500", "DELETE", "/v1/keys/orders/cust-7", "", true, 500},
		{"ok", "DELETE", "/v1/keys/orders/cust-7", "", false, 401},
		{"ok", "GET", "/v1/stats", "", true, 200},
		{"ok", "GET", "/v1/stats", "", false, 401},
		{"fail503", "GET", "/v1/stats", "", true, 503},
		{"ok", "GET", "/v1/routes", "", true, 200},
		{"unimpl", "GET", "/v1/routes", "", true, 404},
		{"fail503", "GET", "/v1/routes", "", true, 503},
		{"ok", "GET", "/v1/lateness", "", true, 200},
		{"ok", "GET", "/v1/lateness?window=10m", "", true, 200},
		{"ok", "GET", "/v1/lateness?window=1s", "", true, 400},
		{"unimpl", "GET", "/v1/lateness", "", true, 501},
		{"ok", "GET", "/v1/series", "", true, 200},
		{"ok", "GET", "/v1/series?route=orders&window=15m&scope=instance", "", true, 200},
		{"ok", "GET", "/v1/series?window=2h", "", true, 400},
		{"ok", "GET", "/v1/series", "", false, 401},
		{"unimpl", "GET", "/v1/series", "", true, 501},
		{"fail503", "GET", "/v1/series", "", true, 503},
		{"fail500", "GET", "/v1/series", "", true, 500},
		{"ok", "GET", "/v1/dead?route=orders&limit=5", "", true, 200},
		{"ok", "GET", "/v1/dead?state=pending", "", true, 400},
		{"unimpl", "GET", "/v1/dead", "", true, 501},
		{"fail500", "GET", "/v1/dead", "", true, 500},
		{"ok", "POST", "/v1/dead/d1/requeue", "", true, 200},
		{"ok", "POST", "/v1/dead/d1/requeue", "", true, 404},
		{"fail503", "POST", "/v1/dead/d1/requeue", "", true, 503},
		{"ok", "DELETE", "/v1/dead?route=orders", "", true, 200},
		{"ok", "DELETE", "/v1/dead?state=dead", "", true, 400},
		{"unimpl", "DELETE", "/v1/dead", "", true, 501},
		{"ok", "POST", "/v1/jobs", `{"kind":"cancel","filter":{"route":"orders","due_to":"2030-01-01T00:00:00Z"},"dry_run":true}`, true, 200},
		{"ok", "POST", "/v1/jobs", `{"kind":"reschedule","filter":{"route":"orders"},"deliver_at":1900000000000}`, true, 202},
		{"ok", "POST", "/v1/jobs", `{"kind":"requeue_dead","filter":{"route":"orders"}}`, true, 202},
		{"ok", "POST", "/v1/jobs", `{"kind":"purge_dead","filter":{"state":"pending"}}`, true, 400},
		{"ok", "POST", "/v1/jobs", `{"kind":"cancel","filter":{"route":"` + strings.Repeat("r", 1100) + `"}}`, true, 413},
		{"unimpl", "POST", "/v1/jobs", `{"kind":"cancel"}`, true, 501},
		{"fail503", "POST", "/v1/jobs", `{"kind":"cancel"}`, true, 503},
		{"ok", "GET", "/v1/jobs", "", true, 200},
		{"ok", "GET", "/v1/jobs?limit=0", "", true, 400},
		{"unimpl", "GET", "/v1/jobs", "", true, 501},
		{"fail500", "GET", "/v1/jobs", "", true, 500},
		{"ok", "GET", "/v1/jobs/job-1", "", true, 200},
		{"ok", "GET", "/v1/jobs/nope", "", true, 404},
		{"unimpl", "GET", "/v1/jobs/job-1", "", true, 501},
		{"fail503", "GET", "/v1/jobs/job-1", "", true, 503},
		{"ok", "POST", "/v1/schedules", `{"id":"nightly","route":"orders","spec":"0 2 * * *","payload":"{}","headers":{"a":"b"},"catch_up":"one","jitter_ms":1000}`, true, 201},
		{"ok", "POST", "/v1/schedules", `{"id":"nightly","route":"orders","spec":"0 2 * * *"}`, true, 409},
		{"ok", "POST", "/v1/schedules", `{"id":"bad","route":"orders","spec":"0 2 * *"}`, true, 400},
		{"ok", "POST", "/v1/schedules", `{"id":"x","route":"orders","spec":"@every 1s","payload":"` + strings.Repeat("x", 1100) + `"}`, true, 413},
		{"unimpl", "POST", "/v1/schedules", `{"id":"x","route":"orders","spec":"@every 1s"}`, true, 501},
		{"fail503", "POST", "/v1/schedules", `{"id":"x","route":"orders","spec":"@every 1s"}`, true, 503},
		{"ok", "GET", "/v1/schedules", "", true, 200},
		{"fail500", "GET", "/v1/schedules", "", true, 500},
		{"ok", "GET", "/v1/schedules/nightly", "", true, 200},
		{"ok", "GET", "/v1/schedules/nope", "", true, 404},
		{"ok", "PUT", "/v1/schedules/nightly", `{"route":"orders","spec":"@every 1h","start":"2030-01-01T00:00:00Z"}`, true, 200},
		{"ok", "PUT", "/v1/schedules/nightly", `{"id":"other","route":"orders","spec":"@every 1h"}`, true, 400},
		{"ok", "PUT", "/v1/schedules/from-config", `{"route":"orders","spec":"@every 1h"}`, true, 409},
		{"ok", "PUT", "/v1/schedules/nope", `{"route":"orders","spec":"@every 1h"}`, true, 404},
		{"ok", "PUT", "/v1/schedules/nightly", `{"route":"orders","spec":"@every 1h","payload":"` + strings.Repeat("x", 1100) + `"}`, true, 413},
		{"ok", "POST", "/v1/schedules/nightly/pause", "", true, 200},
		{"ok", "POST", "/v1/schedules/nope/pause", "", true, 404},
		{"ok", "POST", "/v1/schedules/from-config/pause", "", true, 409},
		{"ok", "POST", "/v1/schedules/nightly/resume", "", true, 200},
		{"ok", "POST", "/v1/schedules/nope/resume", "", true, 404},
		{"ok", "POST", "/v1/schedules/from-config/resume", "", true, 409},
		{"fail503", "POST", "/v1/schedules/nightly/resume", "", true, 503},
		{"ok", "DELETE", "/v1/schedules/from-config", "", true, 409},
		{"ok", "DELETE", "/v1/schedules/nightly", "", true, 204},
		{"ok", "DELETE", "/v1/schedules/nightly", "", true, 404},
		{"fail500", "DELETE", "/v1/schedules/nightly", "", true, 500},
		{"ok", "GET", "/v1/openapi.json", "", false, 200},
		{"ok", "GET", "/ui/", "", false, 200},
		{"ok", "GET", "/", "", false, 302},
		{"ok", "GET", "/healthz", "", false, 200},
		{"ok", "GET", "/readyz", "", false, 200},
		{"notready", "GET", "/readyz", "", false, 503},
		{"ok", "GET", "/metrics", "", false, 200},
	}
}
