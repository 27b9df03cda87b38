package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/membership"
)

// Options configure a Scheduler. Zero values take the defaults of withDefaults (the
// configuration's own defaults, docs/CONTRACT.md); Store and Instance are required.
type Options struct {
	Store    Store
	Clock    clock.Clock // default clock.Real
	Instance string

	Tick      time.Duration // default 1 ms
	Lookahead time.Duration // 0 is valid: claim only what is due
	// ParkClaimHorizon > Lookahead lets a park claim what it parks due up to this far
	// ahead, not only within the lookahead, while at least half the memory budget stays
	// free for the pumps (parkclaim.go). 0 (the default): the lookahead. At most half
	// of InflightLease.
	ParkClaimHorizon time.Duration
	ClaimBatch       int           // default 1000
	InflightLease    time.Duration // default 30 s
	LeaseTTL         time.Duration // default 3 s
	SafetyScan       time.Duration // default 1 s
	MaxInMemory      int           // default 100000
	// MaxInMemoryBytes bounds the bytes of the messages held, as MaxInMemory bounds
	// their number (credits.go); 0 (the default here) bounds them by number only.
	MaxInMemoryBytes int64

	// ParkOnly: Park never claims what it parks (parkclaim.go); everything parked
	// waits for its shard's pump. For tests of the pumps' wake rule.
	ParkOnly bool

	// MaxClockOffset bounds how far this instance's clock may disagree with the
	// store's (Redis TIME) before it stops claiming (clockcheck.go). 0 (the default
	// here; the configuration's default is 500 ms) turns the check off: tests that
	// drive a fake clock against a real Redis need that.
	MaxClockOffset time.Duration

	// AckInterval > 0 makes acknowledgements asynchronous and batched: one goroutine
	// writes everything published since its last write, at most once per AckInterval
	// (acker.go). 0 (the default) writes each batch's acknowledgement before Published
	// returns, which at-most-once delivery requires.
	AckInterval time.Duration

	MaxAttempts    int           // default 10
	BackoffInitial time.Duration // default 1 s
	BackoffMax     time.Duration // default 5 m

	// OnDead, if set, receives messages just dead-lettered (after failed publishes, or
	// buried as invalid by the intake) to copy them to a dead-letter topic/exchange. It
	// runs on a dispatcher worker or the ingress handler's goroutine, so it must not
	// wait for a broker (the bridge queues the copies: egress.SidePublisher).
	OnDead func([]*envelope.Envelope)
	// OnCancelled, if set, receives the ids Cancel just cancelled (they were pending, in
	// flight or dead), for the cancelled receipts. Like OnDead it must not wait for a
	// broker.
	OnCancelled func(route string, ids []string)
	// OnReplaced, if set, receives the ids whose message a replace (x-delay-replace)
	// just took the place of (Replace: outcome replaced), for the replaced receipts.
	// Like OnDead it must not wait for a broker.
	OnReplaced func(route string, ids []string)

	// OnOwnershipRound, if set, runs after every ownership round (the first at start,
	// then about every LeaseTTL/3) on a goroutine of its own, never two at once and
	// never holding up a round: periodic checks of Redis that must not delay lease
	// renewals (the bridge reads Redis's eviction policy there). Its context ends when
	// the scheduler stops, which waits for it to return.
	OnOwnershipRound func(ctx context.Context)
	// Admission, shared with the Kafka sources of the process, holds a process that
	// restarts under the name of an incarnation that died without leaving back from
	// heartbeating and taking shards for a while (membership.Admission); nil: it takes
	// its share at once.
	Admission *membership.Admission

	Observer observe.Observer // default observe.Nop
	Logger   *slog.Logger     // default slog.Default()
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Observer == nil {
		o.Observer = observe.Nop{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Tick, time.Millisecond)
	def(&o.InflightLease, 30*time.Second)
	def(&o.LeaseTTL, 3*time.Second)
	def(&o.SafetyScan, time.Second)
	def(&o.BackoffInitial, time.Second)
	def(&o.BackoffMax, 5*time.Minute)
	if o.ClaimBatch == 0 {
		o.ClaimBatch = 1000
	}
	if o.MaxInMemory == 0 {
		o.MaxInMemory = 100000
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 10
	}
	return o
}

// Validate reports options a scheduler cannot run with, after defaults (New calls it).
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("scheduler: "+format, args...)) }
	if o.Store == nil {
		bad("Options.Store is required")
	} else if o.Store.Shards() < 1 {
		bad("the store has %d shards", o.Store.Shards())
	}
	if o.Instance == "" {
		bad("Options.Instance is required")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Tick", o.Tick}, {"InflightLease", o.InflightLease}, {"SafetyScan", o.SafetyScan}, {"BackoffInitial", o.BackoffInitial}} {
		if d.v <= 0 {
			bad("Options.%s must be positive, got %s", d.name, d.v)
		}
	}
	if o.LeaseTTL < 3*time.Millisecond {
		bad("Options.LeaseTTL must be at least 3ms (renewed every third), got %s", o.LeaseTTL)
	}
	if o.MaxClockOffset < 0 {
		bad("Options.MaxClockOffset must not be negative, got %s", o.MaxClockOffset)
	}
	if o.Lookahead < 0 {
		bad("Options.Lookahead must not be negative, got %s", o.Lookahead)
	}
	if o.ParkClaimHorizon < 0 || o.ParkClaimHorizon > o.InflightLease/2 {
		bad("Options.ParkClaimHorizon must be in [0, InflightLease/2 = %s], got %s", o.InflightLease/2, o.ParkClaimHorizon)
	}
	if o.BackoffMax < o.BackoffInitial {
		bad("Options.BackoffMax %s is below BackoffInitial %s", o.BackoffMax, o.BackoffInitial)
	}
	if o.MaxInMemoryBytes < 0 {
		bad("Options.MaxInMemoryBytes must not be negative, got %d", o.MaxInMemoryBytes)
	}
	if o.ClaimBatch < 1 || o.MaxInMemory < 1 || o.MaxAttempts < 1 {
		bad("ClaimBatch, MaxInMemory and MaxAttempts must be at least 1, got %d, %d, %d", o.ClaimBatch, o.MaxInMemory, o.MaxAttempts)
	}
	return errors.Join(errs...)
}
