package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// SideTarget is where a side publisher sends its copies (the dead-letter publishers:
// egress/kafka.DeadLetters, egress/amqp's dead-letter sink). Publish returns one error
// per message, like Sink.Publish.
type SideTarget interface {
	Publish(ctx context.Context, envs []*envelope.Envelope) []error
}

// Defaults of SideOptions (docs/OPERATIONS.md, "Dead-letter copies").
const (
	DefaultSideMaxBacklog      = 10_000
	DefaultSideMaxBacklogBytes = 2 << 20
	DefaultSideBatch           = 500
	DefaultSidePublishTimeout  = 10 * time.Second
	DefaultSideStopGrace       = 5 * time.Second
)

// SideEntryOverhead is what a queued copy costs beyond its payload, key and headers:
// the envelope, its AMQP properties, ids and the queue's slot. Measured at ~550 B for a
// receipt (heap growth over 50,000 queued receipt envelopes, less their payload, key
// and header bytes); counted as 640 B so the byte bound is a bound on memory.
const SideEntryOverhead = 640

// SideSize is what a queued copy of env counts against MaxBacklogBytes.
func SideSize(env *envelope.Envelope) int {
	n := len(env.Payload) + len(env.Key) + SideEntryOverhead
	for _, h := range env.Headers {
		n += len(h.Key)
		switch v := h.Value.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		}
	}
	return n
}

// SideOptions configure a SidePublisher. Zero values take the defaults.
type SideOptions struct {
	// Queue names what is copied, for the metrics and logs (observe.SideQueues).
	Queue string
	// Targets by name (the broker: "kafka", "amqp"); every offered message goes to each.
	Targets map[string]SideTarget
	// MaxBacklog and MaxBacklogBytes (SideSize of each copy) bound what waits per
	// target; an offer beyond either is dropped, counted and logged
	// (DefaultSideMaxBacklog, DefaultSideMaxBacklogBytes).
	MaxBacklog      int
	MaxBacklogBytes int
	// Batch is the most messages per publish call (DefaultSideBatch).
	Batch int
	// PublishTimeout bounds one publish call (DefaultSidePublishTimeout).
	PublishTimeout time.Duration
	// Backoff between failed attempts of one target (default 200 ms doubling to 30 s).
	Backoff clock.BackoffPolicy
	// StopGrace bounds the last attempt at what is still queued when Stop is called
	// (DefaultSideStopGrace); whatever is left then is dropped, counted and logged.
	StopGrace time.Duration

	Clock    clock.Clock
	Observer observe.Observer
	Logger   *slog.Logger
}

// SidePublisher publishes copies of messages off the hot path: Offer queues them and
// returns at once, one goroutine (Start … Stop, owned by whoever built it) publishes
// them to every target in batches, retrying a failing target with exponential backoff
// on the injected clock while the other targets go on. Each target's backlog is
// bounded: an offer that does not fit is dropped — only the copy, whatever it is a copy
// of is kept elsewhere — counted (observe.SideDropFull) and logged. A message a target
// refuses permanently (fault.Permanent) is dropped the same way (observe.SideDropPermanent).
type SidePublisher struct {
	opt     SideOptions
	log     *slog.Logger
	targets []*sideTarget
	wake    chan struct{} // capacity 1

	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

type sideTarget struct {
	name    string
	t       SideTarget
	backoff *clock.Backoff
	next    time.Time // no attempt before (after a failure)

	mu      sync.Mutex
	queue   []*envelope.Envelope
	bytes   int
	drops   int // dropped since the last log line
	lastLog time.Time
}

// NewSidePublisher checks opt and builds a publisher; Start runs it.
func NewSidePublisher(opt SideOptions) (*SidePublisher, error) {
	if opt.Queue == "" || len(opt.Targets) == 0 {
		return nil, fault.Permanent(errors.New("egress: side publisher needs a queue name and at least one target"))
	}
	if opt.MaxBacklog <= 0 {
		opt.MaxBacklog = DefaultSideMaxBacklog
	}
	if opt.MaxBacklogBytes <= 0 {
		opt.MaxBacklogBytes = DefaultSideMaxBacklogBytes
	}
	if opt.Batch <= 0 {
		opt.Batch = DefaultSideBatch
	}
	if opt.PublishTimeout <= 0 {
		opt.PublishTimeout = DefaultSidePublishTimeout
	}
	if opt.StopGrace <= 0 {
		opt.StopGrace = DefaultSideStopGrace
	}
	if opt.Backoff.Initial <= 0 {
		opt.Backoff = clock.BackoffPolicy{Initial: 200 * time.Millisecond, Max: 30 * time.Second}
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	if opt.Observer == nil {
		opt.Observer = observe.Nop{}
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	p := &SidePublisher{opt: opt, log: opt.Logger.With("component", "side-publisher", "queue", opt.Queue), wake: make(chan struct{}, 1)}
	for _, name := range slices.Sorted(maps.Keys(opt.Targets)) {
		p.targets = append(p.targets, &sideTarget{name: name, t: opt.Targets[name], backoff: clock.NewBackoff(opt.Clock, opt.Backoff)})
		opt.Observer.SideBacklog(opt.Queue, name, 0) // every series from the start, at 0
		opt.Observer.SidePublished(opt.Queue, name, 0)
		opt.Observer.SideFailed(opt.Queue, name, 0)
		for _, r := range observe.SideDropReasons {
			opt.Observer.SideDropped(opt.Queue, name, r, 0)
		}
	}
	return p, nil
}

// Offer queues envs for every target and returns at once; it never blocks on a
// broker. What does not fit in a target's backlog is dropped, counted and logged.
func (p *SidePublisher) Offer(envs []*envelope.Envelope) {
	p.offer(p.targets, envs)
}

// OfferTo is Offer for one target only (the receipts: each route's go to its own
// broker); an unknown target (a wiring error) drops them with an error log.
func (p *SidePublisher) OfferTo(target string, envs []*envelope.Envelope) {
	for _, t := range p.targets {
		if t.name == target {
			p.offer([]*sideTarget{t}, envs)
			return
		}
	}
	if len(envs) > 0 {
		p.log.Error("side copies offered to an unknown target; dropped", "target", target, "n", len(envs))
	}
}

func (p *SidePublisher) offer(targets []*sideTarget, envs []*envelope.Envelope) {
	if len(envs) == 0 {
		return
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	for _, t := range targets {
		if stopped {
			p.drop(t, observe.SideDropShutdown, len(envs), "offered after the publisher stopped")
			continue
		}
		t.mu.Lock()
		n := 0
		for _, env := range envs {
			size := SideSize(env)
			if len(t.queue) >= p.opt.MaxBacklog || t.bytes+size > p.opt.MaxBacklogBytes {
				break
			}
			t.queue = append(t.queue, env)
			t.bytes += size
			n++
		}
		backlog := len(t.queue)
		t.mu.Unlock()
		p.opt.Observer.SideBacklog(p.opt.Queue, t.name, backlog)
		if n < len(envs) {
			p.drop(t, observe.SideDropFull, len(envs)-n, "backlog full")
		}
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// drop counts copies given up and logs them, at most once a minute per target (with
// the number dropped since the last line): a broker down for long under a dead-letter
// storm must not flood the log.
func (p *SidePublisher) drop(t *sideTarget, reason string, n int, why string) {
	p.opt.Observer.SideDropped(p.opt.Queue, t.name, reason, n)
	now := p.opt.Clock.Now()
	t.mu.Lock()
	t.drops += n
	dropped, due := t.drops, t.lastLog.IsZero() || now.Sub(t.lastLog) >= time.Minute
	if due {
		t.drops, t.lastLog = 0, now
	}
	t.mu.Unlock()
	if due {
		p.log.Warn("side copies dropped (the originals are kept)", "target", t.name, "reason", reason,
			"dropped", dropped, "why", why, "max_backlog", p.opt.MaxBacklog)
	}
}

// Backlog is how many copies wait for target.
func (p *SidePublisher) Backlog(target string) int {
	for _, t := range p.targets {
		if t.name == target {
			t.mu.Lock()
			defer t.mu.Unlock()
			return len(t.queue)
		}
	}
	return 0
}

// Start runs the publishing goroutine until Stop.
func (p *SidePublisher) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	p.cancel, p.done = cancel, make(chan struct{})
	p.mu.Unlock()
	go func() {
		defer close(p.done)
		p.run(ctx)
	}()
}

// Stop ends the goroutine: one last attempt per target at what is queued, bounded by
// StopGrace; what is left is dropped, counted and logged. Offers after Stop are
// dropped the same way. Stop waits for the goroutine; calling it twice is harmless.
func (p *SidePublisher) Stop() {
	p.mu.Lock()
	p.stopped = true
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// run publishes until ctx ends, then makes the last attempt.
func (p *SidePublisher) run(ctx context.Context) {
	timer := p.opt.Clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := time.Duration(-1)
		for _, t := range p.targets {
			if d, ok := p.step(ctx, t); ok && (wait < 0 || d < wait) {
				wait = d
			}
		}
		if wait < 0 {
			wait = time.Hour // nothing queued: until an offer wakes us
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			p.final()
			return
		case <-p.wake:
		case <-timer.C():
		}
	}
}

// step publishes one batch to t if it has one and its backoff has passed, and reports
// when to look at t again (ok false: nothing queued).
func (p *SidePublisher) step(ctx context.Context, t *sideTarget) (wait time.Duration, ok bool) {
	t.mu.Lock()
	batch := t.queue[:min(len(t.queue), p.opt.Batch)]
	t.mu.Unlock()
	if len(batch) == 0 {
		return 0, false
	}
	if d := t.next.Sub(p.opt.Clock.Now()); d > 0 {
		return d, true
	}
	if p.publish(ctx, t, batch) {
		t.backoff.Reset()
		t.next = time.Time{}
		return 0, true // more may be queued: look again at once
	}
	d := t.backoff.Next()
	t.next = p.opt.Clock.Now().Add(d)
	return d, true
}

// publish sends batch (the head of t's queue) and removes what was published or
// refused permanently; it reports whether every message left the queue.
func (p *SidePublisher) publish(ctx context.Context, t *sideTarget, batch []*envelope.Envelope) bool {
	pctx, cancel := context.WithTimeout(ctx, p.opt.PublishTimeout)
	errs := t.t.Publish(pctx, batch)
	cancel()
	if len(errs) != len(batch) { // a broken target: retry the whole batch
		errs = slices.Repeat([]error{fmt.Errorf("egress: side target %s returned %d results for %d messages", t.name, len(errs), len(batch))}, len(batch))
	}
	var keep []*envelope.Envelope
	published, permanent := 0, 0
	var first error
	for i, err := range errs {
		switch {
		case err == nil:
			published++
		case fault.IsPermanent(err):
			permanent++
			first = err
		default:
			keep = append(keep, batch[i])
			first = err
		}
	}
	t.mu.Lock()
	rest := t.queue[len(batch):]
	t.queue = append(keep, rest...)
	t.bytes = 0
	for _, env := range t.queue {
		t.bytes += SideSize(env)
	}
	backlog := len(t.queue)
	t.mu.Unlock()
	o := p.opt.Observer
	o.SideBacklog(p.opt.Queue, t.name, backlog)
	if published > 0 {
		o.SidePublished(p.opt.Queue, t.name, published)
	}
	if len(keep) > 0 {
		o.SideFailed(p.opt.Queue, t.name, len(keep))
		if ctx.Err() == nil {
			p.log.Warn("side copies not published; retrying with backoff", "target", t.name, "failed", len(keep), "of", len(batch), "backlog", backlog, "err", first)
		}
	}
	if permanent > 0 {
		p.drop(t, observe.SideDropPermanent, permanent, fmt.Sprintf("refused by the target: %v", first))
	}
	return len(keep) == 0
}

// final is the last attempt after Stop: every target gets its queue once more (in
// batches, no backoff), within StopGrace overall; the rest is dropped.
func (p *SidePublisher) final() {
	ctx, cancel := context.WithTimeout(context.Background(), p.opt.StopGrace)
	defer cancel()
	for _, t := range p.targets {
		for ctx.Err() == nil {
			t.mu.Lock()
			batch := t.queue[:min(len(t.queue), p.opt.Batch)]
			t.mu.Unlock()
			if len(batch) == 0 || !p.publish(ctx, t, batch) {
				break
			}
		}
		t.mu.Lock()
		left := len(t.queue)
		t.queue, t.bytes = nil, 0
		t.mu.Unlock()
		if left > 0 {
			p.opt.Observer.SideBacklog(p.opt.Queue, t.name, 0)
			p.drop(t, observe.SideDropShutdown, left, "still queued at shutdown")
		}
	}
}
