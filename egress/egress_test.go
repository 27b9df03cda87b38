package egress

import (
	"errors"
	"fmt"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// TestFailReasonLabels: every fault.Reason maps to its observe.Fail* label.
func TestFailReasonLabels(t *testing.T) {
	base := errors.New("boom")
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{base, observe.FailOther},
		{fault.Permanent(base), observe.FailOther},
		{fault.Unroutable(base), observe.FailUnroutable},
		{fmt.Errorf("nack: %w", fault.ErrRejected), observe.FailRejected},
		{fault.Unreachable(base), observe.FailUnreachable},
		{fault.UnknownOutcome(base), observe.FailTimeout},
	} {
		if got := FailReason(c.err); got != c.want {
			t.Errorf("FailReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
