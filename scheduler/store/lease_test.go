package store

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestStoreLease(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	ttl := 400 * time.Millisecond

	tok, err := s.AcquireLease(ctx, 0, "i1", ttl)
	if err != nil || tok < 1 {
		t.Fatalf("acquire = %d %v", tok, err)
	}
	if other, err := s.AcquireLease(ctx, 0, "i2", ttl); err != nil || other != 0 {
		t.Fatalf("acquire of a held lease = %d %v, want 0", other, err)
	}
	if again, err := s.AcquireLease(ctx, 0, "i1", ttl); err != nil || again != tok {
		t.Fatalf("re-acquire by holder = %d %v, want its token %d", again, err, tok)
	}
	if ok, err := s.RenewLease(ctx, 0, "i1", tok, ttl); err != nil || !ok {
		t.Fatalf("renew = %v %v", ok, err)
	}
	if ok, _ := s.RenewLease(ctx, 0, "i1", tok+1, ttl); ok {
		t.Fatal("renew with a wrong token succeeded")
	}
	if ok, _ := s.RenewLease(ctx, 0, "i2", tok, ttl); ok {
		t.Fatal("renew by another instance succeeded")
	}
	// Renewals keep it alive past the original TTL.
	for range 3 {
		time.Sleep(ttl / 4) // well inside the TTL even on a loaded machine
		if ok, err := s.RenewLease(ctx, 0, "i1", tok, ttl); err != nil || !ok {
			t.Fatalf("renew before expiry = %v %v", ok, err)
		}
	}
	held, err := s.RenewLeases(ctx, "i1", []Lease{{0, tok}, {1, 99}}, ttl)
	if err != nil || !slices.Equal(held, []bool{true, false}) {
		t.Fatalf("RenewLeases = %v %v", held, err)
	}
	stats, _ := s.ShardStats(ctx)
	if stats[0].Owner != "i1" || stats[0].Token != tok || stats[1].Owner != "" {
		t.Fatalf("owners in stats: %+v %+v", stats[0], stats[1])
	}

	// Expiry: without renewal the lease frees itself and the next holder gets a larger
	// token.
	time.Sleep(ttl + 100*time.Millisecond)
	if ok, _ := s.RenewLease(ctx, 0, "i1", tok, ttl); ok {
		t.Fatal("renewed an expired lease")
	}
	tok2, err := s.AcquireLease(ctx, 0, "i2", ttl)
	if err != nil || tok2 <= tok {
		t.Fatalf("acquire after expiry = %d %v, want > %d", tok2, err, tok)
	}

	// Release: a stale holder cannot free it; the holder can.
	if err := s.ReleaseLease(ctx, 0, "i1", tok); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.AcquireLease(ctx, 0, "i3", ttl); again != 0 {
		t.Fatal("stale release freed the lease")
	}
	if err := s.ReleaseLease(ctx, 0, "i2", tok2); err != nil {
		t.Fatal(err)
	}
	tok3, err := s.AcquireLease(ctx, 0, "i3", time.Minute)
	if err != nil || tok3 <= tok2 {
		t.Fatalf("acquire after release = %d %v", tok3, err)
	}

	if _, err := s.AcquireLease(ctx, 0, "bad|name", ttl); !errors.Is(err, ErrInvalid) {
		t.Fatalf("instance with '|': %v", err)
	}
	if _, err := s.AcquireLease(ctx, 99, "i1", ttl); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shard out of range: %v", err)
	}
}

func TestStoreMembers(t *testing.T) {
	s, _, _ := newTestStore(t, Options{})
	ctx := storeCtx(t)
	for i, name := range []string{"b", "a", "c", "ancient"} {
		at := t0 - int64(i)*1000
		if name == "ancient" {
			at = t0 - 1_000_000
		}
		if err := s.Heartbeat(ctx, name, at); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Members(ctx, t0, 1500*time.Millisecond)
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Members = %v %v, want [a b]", got, err)
	}
	// "c" is stale but young enough to keep; "ancient" was deleted.
	if got, _ := s.Members(ctx, t0, time.Hour); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Members(1h) = %v", got)
	}
	if err := s.Leave(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Members(ctx, t0, time.Hour); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Members after Leave = %v", got)
	}
}
