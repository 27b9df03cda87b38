package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The console charts' history (storeapi.History).

func init() {
	register("SeriesBounded", caseSeriesBounded)
}

// Each instance keeps one interval per slot however many it wrote; an instance whose
// last write is older than keep is not listed; bad arguments are refused.
func caseSeriesBounded(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	const slots = 4
	keep := time.Minute
	if err := s.PutSeries(ctx, "gone", 0, []byte("old"), t0-2*keep.Milliseconds(), keep); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * slots {
		now := t0 + int64(i)*1000
		for _, inst := range []string{"a", "b"} {
			if err := s.PutSeries(ctx, inst, i%slots, []byte(fmt.Sprint(inst, i)), now, keep); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := s.Series(ctx, t0+int64(3*slots)*1000, keep)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["gone"] != nil {
		t.Fatalf("Series lists %d instances (%v), want a and b only", len(got), got)
	}
	for _, inst := range []string{"a", "b"} {
		var vals []string
		for _, v := range got[inst] {
			vals = append(vals, string(v))
		}
		slices.Sort(vals)
		want := []string{inst + "10", inst + "11", inst + "8", inst + "9"}
		if !slices.Equal(vals, want) {
			t.Errorf("%s's intervals = %v, want the last %d: %v", inst, vals, slots, want)
		}
	}
	if later, err := s.Series(ctx, t0+int64(3*slots)*1000+keep.Milliseconds()+1, keep); err != nil || len(later) != 0 {
		t.Errorf("keep after the last writes: %v %v, want none", later, err)
	}
	for _, bad := range []struct {
		inst string
		slot int
		keep time.Duration
	}{{"x|y", 0, keep}, {"", 0, keep}, {"a", -1, keep}, {"a", 0, 0}} {
		if err := s.PutSeries(ctx, bad.inst, bad.slot, nil, t0, bad.keep); !errors.Is(err, storeapi.ErrInvalid) {
			t.Errorf("PutSeries(%q, slot %d, keep %s) = %v, want ErrInvalid", bad.inst, bad.slot, bad.keep, err)
		}
	}
}
