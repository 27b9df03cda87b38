package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

func TestClassification(t *testing.T) {
	base := errors.New("boom")
	perm := Permanent(base)
	trans := Transient(base)
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name        string
		err         error
		perm, trans bool
	}{
		{"nil", nil, false, false},
		{"plain", base, false, false},
		{"permanent", perm, true, false},
		{"permanent wrapped", fmt.Errorf("route x: %w", perm), true, false},
		{"transient", trans, false, true},
		{"transient wrapped", fmt.Errorf("claim: %w", trans), false, true},
		{"permanent wins over transient", Transient(perm), true, false},
		{"marking permanent later wins", Permanent(trans), true, false},
		{"connection refused", dial, false, true},
		{"eof", fmt.Errorf("read: %w", io.EOF), false, true},
		{"deadline", context.DeadlineExceeded, false, true},
		{"canceled", context.Canceled, false, false},
		{"permanent timeout", Permanent(context.DeadlineExceeded), true, false},
	}
	for _, c := range cases {
		if got := IsPermanent(c.err); got != c.perm {
			t.Errorf("%s: IsPermanent = %v, want %v", c.name, got, c.perm)
		}
		if got := IsTransient(c.err); got != c.trans {
			t.Errorf("%s: IsTransient = %v, want %v", c.name, got, c.trans)
		}
	}
	if perm.Error() != "boom" || !errors.Is(perm, base) {
		t.Errorf("Permanent changed the message or lost the cause: %q", perm)
	}
	if Permanent(nil) != nil || Transient(nil) != nil {
		t.Error("marking nil must stay nil")
	}
}
