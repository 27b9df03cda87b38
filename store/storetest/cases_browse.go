package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Browse (order, filters, cursor, scan budget), CountRange and EdgeScore, dead-letter
// listing order.

func init() {
	register("BrowseOrderAndCursor", caseBrowseOrderAndCursor)
	register("BrowseFilters", caseBrowseFilters)
	register("BrowseScanBudget", caseBrowseScanBudget)
	register("BrowseRefusesBadQueries", caseBrowseRefusesBadQueries)
	register("CountRangeAndEdgeScore", caseCountRangeAndEdgeScore)
	register("ListDeadOldestFirst", caseListDeadOldestFirst)
}

// want is a message the suite expects a browse to return: its id and score.
type want struct {
	id    string
	score int64
}

func (w want) String() string { return fmt.Sprintf("%s@%d", w.id, w.score-t0) }

// sortWant puts ws in browse order: score, then id.
func sortWant(ws []want) {
	slices.SortFunc(ws, func(a, b want) int {
		if a.score != b.score {
			return int(a.score - b.score)
		}
		return strings.Compare(a.id, b.id)
	})
}

// browseAll follows q's cursor to the end and returns every item in order; each page
// must hold at most the limit asked for, and pending items carry DueAt = score.
func browseAll(t *testing.T, s storeapi.Store, q storeapi.BrowseQuery) []want {
	t.Helper()
	var out []want
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatalf("browse %+v: no end after 1000 pages", q)
		}
		p, err := s.Browse(storeCtx(t), q)
		if err != nil {
			t.Fatalf("Browse(%+v): %v", q, err)
		}
		if q.Limit > 0 && len(p.Items) > q.Limit {
			t.Fatalf("Browse(%+v): %d items, limit %d", q, len(p.Items), q.Limit)
		}
		for _, it := range p.Items {
			if it.Envelope == nil {
				t.Fatalf("Browse(%+v): item without envelope at %d", q, it.Score)
			}
			if (q.State == "" || q.State == storeapi.StatePending) && it.Envelope.DueAt != it.Score {
				t.Fatalf("Browse: pending %s DueAt %d, score %d", it.Envelope.ID, it.Envelope.DueAt, it.Score)
			}
			out = append(out, want{it.Envelope.ID, it.Score})
		}
		if p.Next == "" {
			return out
		}
		q.Cursor = p.Next
	}
}

func wantBrowse(t *testing.T, s storeapi.Store, what string, q storeapi.BrowseQuery, exp []want) {
	t.Helper()
	got := browseAll(t, s, q)
	sortWant(exp)
	if !slices.Equal(got, exp) {
		t.Fatalf("%s: browse %+v\n got %v\nwant %v", what, q, got, exp)
	}
}

// parkSpread parks n messages over every shard, three per due time (ties ordered by
// id), routes alternating orders/pay, keys k-<id>; it returns them as wants.
func parkSpread(t *testing.T, s storeapi.Store, prefix string, n int) []want {
	t.Helper()
	var envs []*envelope.Envelope
	var ws []want
	for i := range n {
		id := fmt.Sprintf("%s-%02d", prefix, n-1-i) // ids descending while due ascends
		due := t0 + int64(i/3)*1000
		e := env(id, due)
		if i%2 == 1 {
			e.Route = "pay"
		}
		envs = append(envs, e)
		ws = append(ws, want{id, due})
	}
	mustPark(t, s, envs...)
	return ws
}

func caseBrowseOrderAndCursor(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	all := parkSpread(t, s, "m", 40)
	for _, limit := range []int{1, 3, 7, 40, 1000} {
		wantBrowse(t, s, fmt.Sprintf("limit %d", limit), storeapi.BrowseQuery{Limit: limit}, all)
	}
	// The default state is pending and the default limit applies.
	p, err := s.Browse(storeCtx(t), storeapi.BrowseQuery{})
	if err != nil || len(p.Items) != 40 || p.Next != "" {
		t.Fatalf("Browse(defaults) = %d items, next %q, %v", len(p.Items), p.Next, err)
	}
	// A cursor continues where its page ended even after the messages before it left.
	first, err := s.Browse(storeCtx(t), storeapi.BrowseQuery{Limit: 10})
	if err != nil || len(first.Items) != 10 || first.Next == "" {
		t.Fatalf("first page = %d items, next %q, %v", len(first.Items), first.Next, err)
	}
	if _, _, err := s.Cancel(storeCtx(t), first.Items[0].Envelope.ID, t0, storeapi.CancelOptions{}); err != nil {
		t.Fatal(err)
	}
	sortWant(all)
	wantBrowse(t, s, "after a cursor", storeapi.BrowseQuery{Limit: 4, Cursor: first.Next}, all[10:])
}

func caseBrowseFilters(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	all := parkSpread(t, s, "f", 30)
	sortWant(all)
	route := func(id string) string {
		_, _, e, err := s.Get(ctx, id)
		if err != nil || e == nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		return e.Route
	}
	var pay, from2to5, f1x, pay1x []want
	for _, w := range all {
		r := route(w.id)
		if r == "pay" {
			pay = append(pay, w)
		}
		if w.score >= t0+2000 && w.score <= t0+5000 {
			from2to5 = append(from2to5, w)
		}
		if strings.HasPrefix(w.id, "f-1") {
			f1x = append(f1x, w)
			if r == "pay" {
				pay1x = append(pay1x, w)
			}
		}
	}
	wantBrowse(t, s, "route", storeapi.BrowseQuery{Route: "pay", Limit: 4}, pay)
	wantBrowse(t, s, "range (inclusive)", storeapi.BrowseQuery{From: t0 + 2000, To: t0 + 5000, Limit: 4}, from2to5)
	wantBrowse(t, s, "id prefix", storeapi.BrowseQuery{IDPrefix: "f-1", Limit: 3}, f1x)
	wantBrowse(t, s, "key prefix", storeapi.BrowseQuery{KeyPrefix: "k-f-1", Limit: 3}, f1x)
	wantBrowse(t, s, "route and id prefix", storeapi.BrowseQuery{Route: "pay", IDPrefix: "f-1", Limit: 2}, pay1x)
	wantBrowse(t, s, "no match", storeapi.BrowseQuery{Route: "nobody", Limit: 5}, nil)

	// In flight: the score is the lease deadline; dead: the time dead-lettered.
	tok := mustLease(t, s, 0, "i1")
	items, _, err := s.Claim(ctx, 0, "i1", tok, t0+100_000, t0+777_000, 100)
	if err != nil || len(items) == 0 {
		t.Fatalf("Claim = %d, %v", len(items), err)
	}
	var inflight, dead []want
	for i, e := range items {
		if i%2 == 0 {
			inflight = append(inflight, want{e.ID, t0 + 777_000})
			continue
		}
		if err := s.Retry(ctx, 0, []storeapi.RetryItem{{Env: e, Dead: true}}, t0+int64(i)); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, want{e.ID, t0 + int64(i)})
	}
	wantBrowse(t, s, "inflight", storeapi.BrowseQuery{State: storeapi.StateInflight, Limit: 2}, inflight)
	wantBrowse(t, s, "dead", storeapi.BrowseQuery{State: storeapi.StateDead, Limit: 2}, dead)
	var pending []want
	for _, w := range all {
		if s.ShardOf(w.id) != 0 {
			pending = append(pending, w)
		}
	}
	wantBrowse(t, s, "pending after the claim", storeapi.BrowseQuery{Limit: 5}, pending)
}

// A filter that matches rarely ends a page at the scan budget with a cursor; following
// the cursors still finds every match once.
func caseBrowseScanBudget(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	all := parkSpread(t, s, "b", 60)
	var pay, b07 []want
	for _, w := range all {
		if _, _, e, _ := s.Get(storeCtx(t), w.id); e != nil && e.Route == "pay" {
			pay = append(pay, w)
		}
		if w.id == "b-07" {
			b07 = append(b07, w)
		}
	}
	q := storeapi.BrowseQuery{Route: "pay", Limit: 50, MaxScan: 5}
	p, err := s.Browse(storeCtx(t), q)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) >= 50 || p.Next == "" || p.Scanned < 1 {
		t.Fatalf("budget 5: %d items, next %q, scanned %d: want a short page with a cursor", len(p.Items), p.Next, p.Scanned)
	}
	wantBrowse(t, s, "route with a small budget", q, pay)
	wantBrowse(t, s, "id prefix with a small budget", storeapi.BrowseQuery{IDPrefix: "b-07", Limit: 10, MaxScan: 3}, b07)
}

func caseBrowseRefusesBadQueries(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	parkSpread(t, s, "r", 10)
	for _, q := range []storeapi.BrowseQuery{
		{State: storeapi.StateDelivered},
		{State: "bogus"},
		{From: t0 + 10, To: t0},
	} {
		if _, err := s.Browse(ctx, q); !errors.Is(err, storeapi.ErrInvalid) {
			t.Fatalf("Browse(%+v) = %v, want ErrInvalid", q, err)
		}
	}
	p, err := s.Browse(ctx, storeapi.BrowseQuery{Limit: 2})
	if err != nil || p.Next == "" {
		t.Fatalf("Browse = %v, next %q", err, p.Next)
	}
	for _, q := range []storeapi.BrowseQuery{
		{Cursor: "not a cursor!"},
		{Cursor: p.Next, State: storeapi.StateDead}, // a pending cursor
	} {
		if _, err := s.Browse(ctx, q); !errors.Is(err, storeapi.ErrBadCursor) {
			t.Fatalf("Browse(%+v) = %v, want ErrBadCursor", q, err)
		}
	}
}

func caseCountRangeAndEdgeScore(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	count := func(st storeapi.State, from, to, want int64) {
		t.Helper()
		n, err := s.CountRange(ctx, st, from, to)
		if err != nil || n != want {
			t.Fatalf("CountRange(%s, %d, %d) = %d, %v; want %d", st, from, to, n, err, want)
		}
	}
	edge := func(st storeapi.State, from, to int64, highest bool, want int64, wantOK bool) {
		t.Helper()
		v, ok, err := s.EdgeScore(ctx, st, from, to, highest)
		if err != nil || ok != wantOK || (ok && v != want) {
			t.Fatalf("EdgeScore(%s, %d, %d, %v) = %d %v %v; want %d %v", st, from, to, highest, v, ok, err, want, wantOK)
		}
	}
	count(storeapi.StatePending, 0, 0, 0)
	edge(storeapi.StatePending, 0, 0, false, 0, false)
	parkSpread(t, s, "c", 30) // due t0 .. t0+9000, three each
	count(storeapi.StatePending, 0, 0, 30)
	count(storeapi.StatePending, t0+1000, t0+3000, 9) // inclusive both ends
	count(storeapi.StatePending, t0+9001, 0, 0)
	count(storeapi.StateDead, 0, 0, 0)
	edge(storeapi.StatePending, 0, 0, false, t0, true)
	edge(storeapi.StatePending, 0, 0, true, t0+9000, true)
	edge(storeapi.StatePending, t0+1500, t0+7500, false, t0+2000, true)
	edge(storeapi.StatePending, t0+1500, t0+7500, true, t0+7000, true)
	edge(storeapi.StatePending, t0+1500, t0+1900, false, 0, false)

	tok := mustLease(t, s, 2, "i1")
	items, _, err := s.Claim(ctx, 2, "i1", tok, t0+100_000, t0+50_000, 100)
	if err != nil || len(items) == 0 {
		t.Fatalf("Claim = %d, %v", len(items), err)
	}
	count(storeapi.StateInflight, t0+50_000, t0+50_000, int64(len(items)))
	count(storeapi.StatePending, 0, 0, int64(30-len(items)))
	edge(storeapi.StateInflight, 0, 0, true, t0+50_000, true)
	if err := s.Retry(ctx, 2, []storeapi.RetryItem{{Env: items[0], Dead: true}}, t0+5); err != nil {
		t.Fatal(err)
	}
	count(storeapi.StateDead, 0, 0, 1)
	edge(storeapi.StateDead, 0, 0, false, t0+5, true)
	if _, err := s.CountRange(ctx, storeapi.StateCancelled, 0, 0); !errors.Is(err, storeapi.ErrInvalid) {
		t.Fatalf("CountRange(cancelled) = %v, want ErrInvalid", err)
	}
}

func caseListDeadOldestFirst(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	// Buried at descending times while ids ascend: the listing goes by time.
	var order []string
	for i := range 12 {
		e := env(fmt.Sprintf("dl-%02d", i), t0)
		e.Reason = "bad"
		if _, err := s.Bury(ctx, []*envelope.Envelope{e}, t0+int64(100-i)); err != nil {
			t.Fatal(err)
		}
		order = append([]string{e.ID}, order...)
	}
	got, err := s.ListDead(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if g := ids(got); !slices.Equal(g, order[:5]) {
		t.Fatalf("ListDead(5) = %v, want %v", g, order[:5])
	}
	if n, err := s.PurgeDead(ctx); err != nil || n != 12 {
		t.Fatalf("PurgeDead = %d, %v", n, err)
	}
	// Purged ids are not remembered: the same message parks again.
	if parked := mustPark(t, s, env("dl-03", t0)); !parked[0] {
		t.Fatal("a purged dead letter's id was refused by park")
	}
}
