package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// TestRunRefusesPreReleaseStore: a bridge started on a store written by a pre-release
// build (its meta records a shard count and no store format) stops at start with an
// error that says so and what to do, instead of waiting for Redis or serving it.
func TestRunRefusesPreReleaseStore(t *testing.T) {
	rs, cfg := healthConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rs.Client().HSet(ctx, cfg.Prefix+":{default}:meta", "shards", "4").Err(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Run(ctx)
	if !errors.Is(err, storeapi.ErrStoreFormat) {
		t.Fatalf("Run = %v, want ErrStoreFormat", err)
	}
	for _, w := range []string{"pre-release", "flush", "new key prefix"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Run's error %q does not say %q", err, w)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned only when the test's context ended")
	}
}
