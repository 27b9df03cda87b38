package config

import "testing"

// order: key is accepted with at-least-once, named by OrderedRoutes, and refused with
// at-most-once (which acks before the broker confirms).
func TestOrderKey(t *testing.T) {
	cfg, err := load(t, "", nil, append(append([]string{}, minimalRoute...), "routes.0.order=key")...)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.OrderedRoutes(); len(got) != 1 || got[0] != cfg.Routes[0].Name {
		t.Fatalf("OrderedRoutes() = %v, want [%s]", got, cfg.Routes[0].Name)
	}
	_, err = load(t, "", nil, append(append([]string{}, minimalRoute...), "routes.0.order=key", "delivery=at-most-once")...)
	mustFieldError(t, err, "routes[0].order", "flag --set routes.0.order", "at-least-once")
}
