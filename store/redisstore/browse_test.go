package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
)

const browseT0 = int64(1_700_000_000_000)

// browseBackends runs f on a real redis-server and on the embedded miniredis of
// `bridge dev` (the browse script must run on both).
func browseBackends(t *testing.T, shards int, f func(t *testing.T, s *Store)) {
	mk := func(t *testing.T, c redis.UniversalClient) *Store {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := New(ctx, c, Options{Prefix: "b", Cluster: "c", Shards: shards, DoneWindow: time.Hour})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	}
	t.Run("redis-server", func(t *testing.T) { f(t, mk(t, testkit.StartRedis(t).Client())) })
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		f(t, mk(t, c))
	})
}

// browseFixture parks n messages over routes a/b/c with due times in [t0, t0+spread)
// (many sharing one due time) and returns them.
func browseFixture(t *testing.T, s *Store, n int, spread int64) []*envelope.Envelope {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	envs := make([]*envelope.Envelope, n)
	for i := range envs {
		due := browseT0 + rng.Int64N(spread)
		if i%3 == 0 {
			due = browseT0 + 500 // a third share one due time: the cursor must order ties by id
		}
		envs[i] = &envelope.Envelope{
			ID: fmt.Sprintf("m-%04d", i), Route: string(rune('a' + i%3)), SourceBroker: envelope.BrokerKafka,
			Source: "t.delay", DueAt: due, ReceivedAt: browseT0 - 1, Key: []byte(fmt.Sprintf("key-%d", i%10)),
			Payload: []byte("p"),
		}
	}
	if _, _, err := s.Park(context.Background(), envs); err != nil {
		t.Fatalf("Park: %v", err)
	}
	return envs
}

// browseAll pages through q until Next is "", failing on a page over the limit.
func browseAll(t *testing.T, s *Store, q BrowseQuery) (got []BrowseItem, pages int) {
	t.Helper()
	for {
		p, err := s.Browse(context.Background(), q)
		if err != nil {
			t.Fatalf("Browse(%+v): %v", q, err)
		}
		pages++
		if len(p.Items) > max(q.Limit, 1) && q.Limit > 0 {
			t.Fatalf("page of %d items, limit %d", len(p.Items), q.Limit)
		}
		got = append(got, p.Items...)
		if p.Next == "" {
			return got, pages
		}
		if pages > 10_000 {
			t.Fatal("browse does not end")
		}
		q.Cursor = p.Next
	}
}

func wantOrder(envs []*envelope.Envelope, keep func(*envelope.Envelope) bool) []string {
	var sel []*envelope.Envelope
	for _, e := range envs {
		if keep(e) {
			sel = append(sel, e)
		}
	}
	slices.SortFunc(sel, func(a, b *envelope.Envelope) int {
		return cmp.Or(cmp.Compare(a.DueAt, b.DueAt), strings.Compare(a.ID, b.ID))
	})
	out := make([]string, len(sel))
	for i, e := range sel {
		out[i] = e.ID
	}
	return out
}

func itemIDs(items []BrowseItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Envelope.ID
	}
	return out
}

func TestBrowseOrdersAndPagesAcrossShards(t *testing.T) {
	browseBackends(t, 16, func(t *testing.T, s *Store) {
		envs := browseFixture(t, s, 600, 5000)
		for _, limit := range []int{1, 7, 100, 1000} {
			got, pages := browseAll(t, s, BrowseQuery{Limit: limit})
			want := wantOrder(envs, func(*envelope.Envelope) bool { return true })
			if !slices.Equal(itemIDs(got), want) {
				t.Fatalf("limit %d: %d items in %d pages, not the (due, id) order of the %d parked", limit, len(got), pages, len(want))
			}
			for _, it := range got {
				if it.Score != it.Envelope.DueAt {
					t.Fatalf("item %s: score %d, due %d", it.Envelope.ID, it.Score, it.Envelope.DueAt)
				}
			}
		}
	})
}

func TestBrowseFilters(t *testing.T) {
	browseBackends(t, 8, func(t *testing.T, s *Store) {
		envs := browseFixture(t, s, 400, 4000)
		cases := []struct {
			name string
			q    BrowseQuery
			keep func(*envelope.Envelope) bool
		}{
			{"route", BrowseQuery{Route: "b"}, func(e *envelope.Envelope) bool { return e.Route == "b" }},
			{"id prefix", BrowseQuery{IDPrefix: "m-01"}, func(e *envelope.Envelope) bool { return strings.HasPrefix(e.ID, "m-01") }},
			{"key prefix", BrowseQuery{KeyPrefix: "key-7"}, func(e *envelope.Envelope) bool { return string(e.Key) == "key-7" }},
			{"due range", BrowseQuery{From: browseT0 + 500, To: browseT0 + 2000}, func(e *envelope.Envelope) bool {
				return e.DueAt >= browseT0+500 && e.DueAt <= browseT0+2000
			}},
			{"route and range", BrowseQuery{Route: "a", From: browseT0 + 501}, func(e *envelope.Envelope) bool {
				return e.Route == "a" && e.DueAt >= browseT0+501
			}},
			{"nothing", BrowseQuery{Route: "zzz"}, func(*envelope.Envelope) bool { return false }},
		}
		for _, c := range cases {
			c.q.Limit = 13
			got, _ := browseAll(t, s, c.q)
			if want := wantOrder(envs, c.keep); !slices.Equal(itemIDs(got), want) {
				t.Errorf("%s: got %d items, want %d in order", c.name, len(got), len(want))
			}
		}
	})
}

// A filter that matches rarely returns short pages with a cursor (bounded work per
// page), and paging on finds every match.
func TestBrowseRareFilterIsBoundedPerPage(t *testing.T) {
	browseBackends(t, 4, func(t *testing.T, s *Store) {
		envs := browseFixture(t, s, 900, 9000)
		q := BrowseQuery{IDPrefix: "m-08", Limit: 50, MaxScan: 40}
		var got []BrowseItem
		short := 0
		for pages := 0; ; pages++ {
			p, err := s.Browse(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if p.Scanned > q.MaxScan+q.Limit+16 {
				t.Fatalf("page scanned %d candidates, budget %d", p.Scanned, q.MaxScan)
			}
			if p.Next != "" && len(p.Items) < q.Limit {
				short++
			}
			got = append(got, p.Items...)
			if p.Next == "" {
				break
			}
			q.Cursor = p.Next
		}
		want := wantOrder(envs, func(e *envelope.Envelope) bool { return strings.HasPrefix(e.ID, "m-08") })
		if !slices.Equal(itemIDs(got), want) {
			t.Fatalf("got %d, want %d matches in order", len(got), len(want))
		}
		if short == 0 {
			t.Fatal("no short page: the scan budget was never reached")
		}
	})
}

func TestBrowseStatesAndCursorErrors(t *testing.T) {
	browseBackends(t, 4, func(t *testing.T, s *Store) {
		ctx := context.Background()
		envs := browseFixture(t, s, 40, 100)
		tok, err := s.AcquireLease(ctx, 1, "i1", time.Minute)
		if err != nil || tok == 0 {
			t.Fatalf("lease: %d %v", tok, err)
		}
		claimed, _, err := s.Claim(ctx, 1, "i1", tok, browseT0+10_000, browseT0+60_000, 100)
		if err != nil || len(claimed) == 0 {
			t.Fatalf("claim: %d %v", len(claimed), err)
		}
		inflight, _ := browseAll(t, s, BrowseQuery{State: StateInflight, Limit: 5})
		if len(inflight) != len(claimed) {
			t.Fatalf("inflight browse: %d, claimed %d", len(inflight), len(claimed))
		}
		for _, it := range inflight {
			if it.Score != browseT0+60_000 {
				t.Fatalf("inflight score %d, want the lease deadline", it.Score)
			}
		}
		pending, _ := browseAll(t, s, BrowseQuery{Limit: 5})
		if len(pending)+len(claimed) != len(envs) {
			t.Fatalf("pending %d + inflight %d != %d parked", len(pending), len(claimed), len(envs))
		}
		dead := []*envelope.Envelope{{ID: "dead-1", Route: "a", DueAt: browseT0, Reason: "bad_delay", Payload: []byte("x")}}
		if _, err := s.Bury(ctx, dead, browseT0+7); err != nil {
			t.Fatal(err)
		}
		got, _ := browseAll(t, s, BrowseQuery{State: StateDead})
		if len(got) != 1 || got[0].Envelope.Reason != "bad_delay" || got[0].Score != browseT0+7 {
			t.Fatalf("dead browse = %+v", got)
		}

		p, err := s.Browse(ctx, BrowseQuery{Limit: 2})
		if err != nil || p.Next == "" {
			t.Fatalf("first page: %v, next %q", err, p.Next)
		}
		for _, q := range []BrowseQuery{
			{Cursor: "%%%"},
			{Cursor: p.Next, State: StateDead},
			{State: StateDelivered},
			{From: 10, To: 5},
		} {
			if _, err := s.Browse(ctx, q); !errors.Is(err, ErrBadCursor) && !errors.Is(err, ErrInvalid) {
				t.Errorf("Browse(%+v) = %v, want ErrBadCursor or ErrInvalid", q, err)
			}
		}
	})
}

// One shard holds everything due first: a page must not fill up with later messages of
// other shards before that shard's slice has been read further.
func TestBrowseSkewedShard(t *testing.T) {
	browseBackends(t, 16, func(t *testing.T, s *Store) {
		var envs []*envelope.Envelope
		for i := 0; len(envs) < 300; i++ {
			id := fmt.Sprintf("s-%04d", i)
			due := browseT0 + 10_000 + int64(i)
			if s.ShardOf(id) == 0 {
				due = browseT0 + int64(i)
			}
			envs = append(envs, &envelope.Envelope{ID: id, Route: "a", DueAt: due, Payload: []byte("p")})
		}
		if _, _, err := s.Park(context.Background(), envs); err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{10, 100} {
			got, _ := browseAll(t, s, BrowseQuery{Limit: limit})
			if want := wantOrder(envs, func(*envelope.Envelope) bool { return true }); !slices.Equal(itemIDs(got), want) {
				t.Fatalf("limit %d: not in due order", limit)
			}
		}
	})
}
