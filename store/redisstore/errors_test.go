package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/fault"
)

// replyErr is an error reply as go-redis reports it (an error with RedisError).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestRedisErrMapping: the replies of a server that is loading, failing over or
// refusing for a while, and network failures, become fault.Transient; the rest is
// left unmarked (neither transient nor permanent).
func TestRedisErrMapping(t *testing.T) {
	transient := []error{
		replyErr("LOADING Redis is loading the dataset in memory"),
		replyErr("READONLY You can't write against a read only replica."),
		replyErr("CLUSTERDOWN The cluster is down"),
		replyErr("TRYAGAIN Multiple keys request during rehashing of slot"),
		replyErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
		replyErr("MOVED 3999 127.0.0.1:6381"),
		replyErr("ASK 3999 127.0.0.1:6381"),
		replyErr("BUSY Redis is busy running a script."),
		replyErr("OOM command not allowed when used memory > 'maxmemory'."),
		replyErr("ERR max number of clients reached"),
		replyErr("NOREPLICAS Not enough good replicas to write."),
		redis.ErrPoolTimeout, context.DeadlineExceeded, syscall.ECONNREFUSED, syscall.ECONNRESET,
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no route")},
	}
	for _, e := range transient {
		got := redisErr(e)
		if !errors.Is(got, fault.ErrTransient) || !errors.Is(got, e) || got.Error() != e.Error() {
			t.Errorf("redisErr(%v) = %v, want it marked transient, unchanged otherwise", e, got)
		}
		if wrapped := fmt.Errorf("scheduler: x: %w", redisErr(e)); !fault.IsTransient(wrapped) {
			t.Errorf("%v not transient once wrapped", e)
		}
	}
	neither := []error{
		replyErr("ERR Error running script (call to f_x): @user_script:1: oops"),
		replyErr("NOAUTH Authentication required."),
		replyErr("FENCED shard lease is not held by i1|1"),
		redis.ErrClosed, context.Canceled, errors.New("x"),
	}
	for _, e := range neither {
		if got := redisErr(e); fault.IsTransient(got) || fault.IsPermanent(got) {
			t.Errorf("redisErr(%v) = %v, want it unmarked", e, got)
		}
	}
	if redisErr(nil) != nil || redisErr(redis.Nil) != redis.Nil {
		t.Error("nil and redis.Nil must pass unchanged")
	}
	if got := redisErr(ErrInvalid); !fault.IsPermanent(got) || fault.IsTransient(got) {
		t.Errorf("an already permanent error became %v", got)
	}
}
