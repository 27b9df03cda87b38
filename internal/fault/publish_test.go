package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestReasonOf(t *testing.T) {
	base := errors.New("boom")
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no route")}
	cases := []struct {
		name    string
		err     error
		reason  Reason
		unknown bool
	}{
		{"nil", nil, "", false},
		{"plain", base, ReasonOther, false},
		{"permanent alone", Permanent(base), ReasonOther, false},
		{"unroutable", Unroutable(base), ReasonUnroutable, false},
		{"rejected", fmt.Errorf("nack: %w", ErrRejected), ReasonRejected, false},
		{"permanent and rejected", Permanent(Rejected(base)), ReasonRejected, false},
		{"unreachable", Unreachable(base), ReasonUnreachable, false},
		{"rejected wins over unreachable", Rejected(Unreachable(base)), ReasonRejected, false},
		{"unroutable wins over rejected", Unroutable(Rejected(base)), ReasonUnroutable, false},
		{"failed dial", fmt.Errorf("publish: %w", dial), ReasonUnreachable, false},
		{"refused", syscall.ECONNREFUSED, ReasonUnreachable, false},
		{"reset", fmt.Errorf("write: %w", syscall.ECONNRESET), ReasonUnreachable, false},
		{"eof", io.ErrUnexpectedEOF, ReasonUnreachable, false},
		{"closed conn", net.ErrClosed, ReasonUnreachable, false},
		{"unknown outcome", UnknownOutcome(base), ReasonTimeout, true},
		{"unknown outcome wrapped", fmt.Errorf("no confirm: %w: %w", ErrUnknownOutcome, context.Canceled), ReasonTimeout, true},
		{"unreachable wins over unknown outcome", Unreachable(UnknownOutcome(base)), ReasonUnreachable, true},
		{"ctx deadline", context.DeadlineExceeded, ReasonTimeout, false},
		{"socket deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), ReasonTimeout, false},
		{"canceled", context.Canceled, ReasonOther, false},
	}
	for _, c := range cases {
		if got := ReasonOf(c.err); got != c.reason {
			t.Errorf("%s: ReasonOf = %q, want %q", c.name, got, c.reason)
		}
		if got := IsUnreachable(c.err); got != (c.reason == ReasonUnreachable) {
			t.Errorf("%s: IsUnreachable = %v", c.name, got)
		}
		if got := IsUnknownOutcome(c.err); got != c.unknown {
			t.Errorf("%s: IsUnknownOutcome = %v, want %v", c.name, got, c.unknown)
		}
	}
}

func TestPublishMarksKeepMessageAndCause(t *testing.T) {
	base := errors.New("boom")
	for name, mk := range map[string]func(error) error{
		"Unreachable": Unreachable, "Rejected": Rejected, "Unroutable": Unroutable, "UnknownOutcome": UnknownOutcome,
	} {
		err := mk(base)
		if err.Error() != "boom" || !errors.Is(err, base) {
			t.Errorf("%s changed the message or lost the cause: %q", name, err)
		}
		if mk(nil) != nil {
			t.Errorf("%s(nil) != nil", name)
		}
		if again := mk(err); again != err {
			t.Errorf("%s marked twice: %#v", name, again)
		}
		if IsPermanent(err) || IsPermanent(fmt.Errorf("x: %w", err)) {
			t.Errorf("%s made the error permanent", name)
		}
	}
	if err := Permanent(Rejected(base)); !IsPermanent(err) || ReasonOf(err) != ReasonRejected {
		t.Errorf("permanent + rejected: permanent %v, reason %q", IsPermanent(err), ReasonOf(err))
	}
}
