package storetest

import (
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Replace by id (x-delay-replace): the outcome in every state of the id
// (docs/CONTRACT.md "Replace").

func init() {
	register("ReplacePendingSameRoute", caseReplacePending)
	register("ReplaceOtherRouteLeftAlone", caseReplaceOtherRoute)
	register("ReplaceInflightThenAck", caseReplaceInflightAck)
	register("ReplaceInflightThenRetryRecoverCancel", caseReplaceInflightPutBack)
	register("ReplaceDeadDeliveredCancelledUnknown", caseReplaceDoneStates)
}

type rr = storeapi.ReplaceResult

func mustReplace(t *testing.T, s storeapi.Store, envs ...*envelope.Envelope) ([]rr, map[int]int64) {
	t.Helper()
	res, minDue, err := s.ReplaceEach(storeCtx(t), envs)
	if err != nil {
		t.Fatalf("ReplaceEach: %v", err)
	}
	return res, minDue
}

// version is env(id, due) with a payload naming the version.
func version(id string, due int64, v string) *envelope.Envelope {
	e := env(id, due)
	e.Payload = []byte(v)
	e.Headers = append(e.Headers, envelope.Header{Key: "v", Value: v})
	return e
}

func wantPayload(t *testing.T, e *envelope.Envelope, want string) {
	t.Helper()
	if e == nil || string(e.Payload) != want {
		t.Fatalf("envelope %+v, want payload %q", e, want)
	}
}

// A pending message of the same route takes the new payload, headers and due time in
// one step; it is counted once; the same id twice in one call: the later wins; a claim
// sees only the last version at its due time.
func caseReplacePending(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	a := idsOnShard(s, 1, 1, "rp")[0]
	mustPark(t, s, version(a, t0+60_000, "v1"))
	res, minDue := mustReplace(t, s, version(a, t0+90_000, "v2"), version(a, t0+120_000, "v3"))
	want := []rr{{Prior: storeapi.StatePending, Outcome: storeapi.ReplaceReplaced}, {Prior: storeapi.StatePending, Outcome: storeapi.ReplaceReplaced}}
	if !slices.Equal(res, want) {
		t.Fatalf("ReplaceEach = %+v, want %+v", res, want)
	}
	if minDue[1] != t0+90_000 {
		t.Fatalf("minDue = %v, want shard 1 at the earliest due of the call", minDue)
	}
	e := wantState(t, s, a, storeapi.StatePending, t0+120_000)
	wantPayload(t, e, "v3")
	if e.DueAt != t0+120_000 || e.Headers[len(e.Headers)-1].Value != "v3" {
		t.Fatalf("replaced envelope %+v: want DueAt and headers of v3", e)
	}
	wantCounts(t, s, "replaced", map[string]rc{"orders": {Pending: 1}})
	tok := mustLease(t, s, 1, "i1")
	if items, next := mustClaim(t, s, 1, tok, t0+60_000, 10); len(items) != 0 || next != t0+120_000 {
		t.Fatalf("claim at the old due time = %d items, next %d: want none, next at the new due", len(items), next)
	}
	items, _ := mustClaim(t, s, 1, tok, t0+120_000, 10)
	if len(items) != 1 {
		t.Fatalf("claim at the new due = %d items, want 1", len(items))
	}
	wantPayload(t, items[0], "v3")
}

// An id pending, in flight or dead on another route is left alone: refused with its
// state, its message unchanged.
func caseReplaceOtherRoute(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 0, 3, "ro")
	for _, id := range a {
		mustPark(t, s, envOn(id, "pay", t0))
	}
	tok := mustLease(t, s, 0, "i1")
	mustClaim(t, s, 0, tok, t0, 10)
	if err := s.Retry(ctx, 0, []storeapi.RetryItem{{Env: envOn(a[0], "pay", t0+5_000), Due: t0 + 5_000}, {Env: envOn(a[2], "pay", t0), Dead: true}}, t0); err != nil {
		t.Fatal(err)
	}
	res, minDue := mustReplace(t, s, version(a[0], t0+1, "x"), version(a[1], t0+1, "x"), version(a[2], t0+1, "x"))
	want := []rr{
		{Prior: storeapi.StatePending, Outcome: storeapi.ReplaceRefused},
		{Prior: storeapi.StateInflight, Outcome: storeapi.ReplaceRefused},
		{Prior: storeapi.StateDead, Outcome: storeapi.ReplaceRefused},
	}
	if !slices.Equal(res, want) || len(minDue) != 0 {
		t.Fatalf("ReplaceEach = %+v minDue %v, want %+v and nothing new", res, minDue, want)
	}
	wantPayload(t, wantState(t, s, a[0], storeapi.StatePending, t0+5_000), "payload "+a[0])
	wantPayload(t, wantState(t, s, a[1], storeapi.StateInflight, -1), "payload "+a[1])
	wantPayload(t, wantState(t, s, a[2], storeapi.StateDead, -1), "payload "+a[2])
	wantCounts(t, s, "other route", map[string]rc{"pay": {Pending: 1, Inflight: 1, Dead: 1}})
}

// In flight: the new version waits as the id's successor (Get shows it, pending at its
// due; counted once, in flight); when the in-flight version is acked the successor
// becomes pending (not delivered), is claimed once as the new version, and its own ack
// records the id delivered. A second replace replaces the successor.
func caseReplaceInflightAck(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 3, 1, "ri")[0]
	mustPark(t, s, version(a, t0, "v1"))
	tok := mustLease(t, s, 3, "i1")
	mustClaim(t, s, 3, tok, t0, 10)
	res, minDue := mustReplace(t, s, version(a, t0+10_000, "v2"))
	if want := (rr{Prior: storeapi.StateInflight, Outcome: storeapi.ReplaceReplaced}); res[0] != want || len(minDue) != 0 {
		t.Fatalf("ReplaceEach = %+v minDue %v, want %+v and nothing pending yet", res, minDue, want)
	}
	mustReplace(t, s, version(a, t0+20_000, "v3"))
	wantPayload(t, wantState(t, s, a, storeapi.StatePending, t0+20_000), "v3")
	wantCounts(t, s, "successor", map[string]rc{"orders": {Inflight: 1}})
	if prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{version(a, t0, "dup")}); err != nil || prior[0] != storeapi.StateInflight {
		t.Fatalf("plain park of the id = %q %v, want refused inflight", prior, err)
	}
	if err := s.Ack(ctx, 3, []string{a}, t0+1_000); err != nil {
		t.Fatal(err)
	}
	wantPayload(t, wantState(t, s, a, storeapi.StatePending, t0+20_000), "v3")
	wantCounts(t, s, "acked old version", map[string]rc{"orders": {Pending: 1}})
	if items, _ := mustClaim(t, s, 3, tok, t0+19_999, 10); len(items) != 0 {
		t.Fatalf("successor claimed before its due: %d items", len(items))
	}
	items, _ := mustClaim(t, s, 3, tok, t0+20_000, 10)
	if len(items) != 1 {
		t.Fatalf("claim = %d items, want the successor", len(items))
	}
	wantPayload(t, items[0], "v3")
	if err := s.Ack(ctx, 3, []string{a}, t0+21_000); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a, storeapi.StateDelivered, -1)
	wantCounts(t, s, "delivered", map[string]rc{})
}

// In flight, then put back: a retry (to pending or to the dead letters) and a recovery
// do not bring the old version back: the successor takes its place, at its own due
// time. A cancel cancels both.
func caseReplaceInflightPutBack(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 2, 4, "rb")
	for _, id := range a {
		mustPark(t, s, version(id, t0, "v1"))
	}
	tok := mustLease(t, s, 2, "i1")
	mustClaim(t, s, 2, tok, t0, 10)
	for i, id := range a {
		mustReplace(t, s, version(id, t0+int64(i+1)*1000, "v2"))
	}
	err := s.Retry(ctx, 2, []storeapi.RetryItem{{Env: version(a[0], t0+500, "v1"), Due: t0 + 500}, {Env: version(a[1], t0, "v1"), Dead: true}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st, _, err := s.Cancel(ctx, a[3], t0, storeapi.CancelOptions{Route: "orders"}); err != nil || st != storeapi.StateInflight {
		t.Fatalf("Cancel = %q %v, want inflight", st, err)
	}
	if _, _, err := s.RecoverAll(ctx, 2, t0+100, 10); err != nil {
		t.Fatal(err)
	}
	wantPayload(t, wantState(t, s, a[0], storeapi.StatePending, t0+1000), "v2")
	wantPayload(t, wantState(t, s, a[1], storeapi.StatePending, t0+2000), "v2")
	wantPayload(t, wantState(t, s, a[2], storeapi.StatePending, t0+3000), "v2")
	wantState(t, s, a[3], storeapi.StateCancelled, -1)
	wantCounts(t, s, "put back", map[string]rc{"orders": {Pending: 3}})
	if err := s.Ack(ctx, 2, []string{a[3]}, t0); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a[3], storeapi.StateCancelled, -1)
	items, _ := mustClaim(t, s, 2, tok, t0+10_000, 10)
	if len(items) != 3 {
		t.Fatalf("claim = %d, want the three successors", len(items))
	}
	for _, e := range items {
		wantPayload(t, e, "v2")
	}
}

// Dead: replaced by the new version, pending. Delivered: parked anew (and a plain
// duplicate of it then reads pending, not delivered). Cancelled on this route: refused.
// Another route's tombstone or an unknown id: parked.
func caseReplaceDoneStates(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 5, "rd")
	dead := version(a[0], t0, "v1")
	dead.Reason = "bad_delay: x"
	if _, err := s.Bury(ctx, []*envelope.Envelope{dead}, t0); err != nil {
		t.Fatal(err)
	}
	mustPark(t, s, version(a[1], t0, "v1"))
	tok := mustLease(t, s, 1, "i1")
	mustClaim(t, s, 1, tok, t0, 10)
	if err := s.Ack(ctx, 1, []string{a[1]}, t0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, route string }{{a[2], "orders"}, {a[3], "pay"}} {
		if _, _, err := s.Cancel(ctx, c.id, t0, storeapi.CancelOptions{Route: c.route, Tombstone: true}); err != nil {
			t.Fatal(err)
		}
	}
	res, minDue := mustReplace(t, s, version(a[0], t0+1000, "v2"), version(a[1], t0+2000, "v2"),
		version(a[2], t0+3000, "v2"), version(a[3], t0+4000, "v2"), version(a[4], t0+5000, "v2"))
	want := []rr{
		{Prior: storeapi.StateDead, Outcome: storeapi.ReplaceReplaced},
		{Prior: storeapi.StateDelivered, Outcome: storeapi.ReplaceParked},
		{Prior: storeapi.StateCancelled, Outcome: storeapi.ReplaceRefused},
		{Prior: storeapi.StateUnknown, Outcome: storeapi.ReplaceParked},
		{Prior: storeapi.StateUnknown, Outcome: storeapi.ReplaceParked},
	}
	if !slices.Equal(res, want) {
		t.Fatalf("ReplaceEach = %+v, want %+v", res, want)
	}
	if minDue[1] != t0+1000 {
		t.Fatalf("minDue = %v, want shard 1 at %d", minDue, t0+1000)
	}
	e := wantState(t, s, a[0], storeapi.StatePending, t0+1000)
	wantPayload(t, e, "v2")
	if e.Reason != "" {
		t.Fatalf("replaced dead letter keeps reason %q", e.Reason)
	}
	wantPayload(t, wantState(t, s, a[1], storeapi.StatePending, t0+2000), "v2")
	wantState(t, s, a[2], storeapi.StateCancelled, -1)
	wantPayload(t, wantState(t, s, a[3], storeapi.StatePending, t0+4000), "v2")
	wantPayload(t, wantState(t, s, a[4], storeapi.StatePending, t0+5000), "v2")
	wantCounts(t, s, "done states", map[string]rc{"orders": {Pending: 4}})
	if prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{version(a[1], t0, "dup")}); err != nil || prior[0] != storeapi.StatePending {
		t.Fatalf("plain park of the re-parked id = %q %v, want refused pending", prior, err)
	}
}
