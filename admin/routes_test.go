package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
)

// routesFake is a fakeBackend that also reports routes.
type routesFake struct {
	*fakeBackend
	routes     RoutesResponse
	lastSeries SeriesQuery // the last query Series answered (series_test.go)
}

func (f *routesFake) Routes(context.Context) (RoutesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return RoutesResponse{}, f.failWith
	}
	return f.routes, nil
}

// /readyz lists every check when the backend returns a *NotReadyError, and the error
// text names only the failing ones.
func TestReadyzListsChecks(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "secret")
	f.notReady = &NotReadyError{Checks: []Check{
		{Name: "redis", OK: true},
		{Name: "ingress orders", OK: false, Detail: "kafka:orders.delay stalled"},
		{Name: "egress kafka", OK: false, Detail: "dial tcp: connection refused"},
	}}
	r := do(t, s, "GET", "/readyz", "") // open path: no token needed
	r.expect(t, http.StatusServiceUnavailable, "status", "error", "checks")
	want := "ingress orders: kafka:orders.delay stalled; egress kafka: dial tcp: connection refused"
	if r.body["error"] != want {
		t.Errorf("error = %q, want %q", r.body["error"], want)
	}
	var body struct {
		Checks []Check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.raw), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Checks) != 3 || !body.Checks[0].OK || body.Checks[1].OK || body.Checks[2].Name != "egress kafka" {
		t.Errorf("checks = %+v", body.Checks)
	}
	f.notReady = nil
	do(t, s, "GET", "/readyz", "").expect(t, http.StatusOK, "status")
}

func TestRoutesEndpoint(t *testing.T) {
	plain := newTestServer(newFake(), "")
	do(t, plain, "GET", "/v1/routes", "").expectError(t, http.StatusNotFound, "", "does not report routes")

	f := &routesFake{fakeBackend: newFake(), routes: RoutesResponse{Instance: "i1", Routes: []RouteStatus{{
		Name:    "orders",
		Ingress: IngressStatus{Source: "kafka:orders.delay", State: "stalled", Partitions: []int{0, 2}, Lag: 17, Rebuilds: 1},
		Egress:  EgressStatus{Broker: "kafka", Target: "orders", Reachable: true},
	}}}}
	s := NewServer(Options{Backend: f, Token: "tok", Logger: quiet})
	do(t, s, "GET", "/v1/routes", "").expectError(t, http.StatusUnauthorized, "", "bearer")
	r := do(t, s, "GET", "/v1/routes", "", "Authorization", "Bearer tok")
	r.expect(t, http.StatusOK, "routes", "instance")
	var got RoutesResponse
	if err := json.Unmarshal([]byte(r.raw), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Routes) != 1 || got.Routes[0].Ingress.Lag != 17 || got.Routes[0].Ingress.State != "stalled" ||
		len(got.Routes[0].Ingress.Partitions) != 2 || got.Routes[0].Ready {
		t.Errorf("routes = %s", r.raw)
	}
	f.failWith = ErrUnavailable
	do(t, s, "GET", "/v1/routes", "", "Authorization", "Bearer tok").expectError(t, http.StatusServiceUnavailable, "", "unavailable")
}
