package egress

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Completer records the outcome of each publish. The scheduler implements it; it also
// returns the in-memory credits the messages held (back-pressure).
type Completer interface {
	// Published is called once per batch of messages the broker confirmed.
	Published(ctx context.Context, envs []*envelope.Envelope)
	// Failed is called for messages whose publish failed (err per message, same order);
	// the completer schedules a retry with backoff or dead-letters them.
	Failed(ctx context.Context, envs []*envelope.Envelope, errs []error)
	// Dropped is called for messages the dispatcher did not publish because this
	// instance may no longer own their shard (its lease may have passed to another
	// instance, which recovers and fires them). Nothing is written to Redis.
	Dropped(envs []*envelope.Envelope)
	// Unpublished is called during shutdown for fired messages the dispatcher did not
	// hand to a sink (see DispatcherOptions.ShutdownDrain). Nothing was sent: they go
	// back to pending unchanged, for whoever owns their shard next.
	Unpublished(envs []*envelope.Envelope)
}

// RouteSink binds a route to the sink serving its target broker.
type RouteSink struct {
	Sink    Sink
	Broker  string  // envelope.BrokerKafka / BrokerAMQP, for metrics
	MaxRate float64 // messages per second, 0 = unlimited
}

// DispatcherOptions configure a Dispatcher.
type DispatcherOptions struct {
	Routes    map[string]RouteSink
	Completer Completer
	// Workers publishing concurrently (default 4). Concurrent batches let the Kafka
	// writer and AMQP confirm pipelines fill while another batch waits for acks.
	Workers int
	// MaxBatch bounds one Publish call (default 1000).
	MaxBatch int
	// PublishTimeout bounds how long one Publish call waits for the broker's answers
	// (default 10s; the bridge derives it from the in-flight lease). A message written
	// but not answered by then has an unknown outcome: the completer leaves it in flight
	// rather than re-sending it, so it must stay below the in-flight lease, and above
	// the broker stalls it should ride out without duplicates.
	PublishTimeout time.Duration
	// ShutdownDrain is how long, once Run's ctx is done, batches still queued are
	// published (default 5s); those taken later go back unpublished
	// (Completer.Unpublished), so a stalled broker cannot hold a shutdown for one
	// publish timeout per queued batch. Publishes already under way are never cut short.
	ShutdownDrain time.Duration
	// AtMostOnce acknowledges (removes from Redis) before publishing.
	AtMostOnce bool
	// Owned reports whether this instance still holds the shard lease for env; a
	// message whose shard was lost is dropped instead of published (local fencing).
	Owned    func(env *envelope.Envelope) bool
	Observer observe.Observer
	Logger   *slog.Logger
	// OnDelivered, if set, is told each batch the broker confirmed (one route, at the
	// confirmed time; Kafka envelopes carry their Placed) after the completer has it:
	// the delivery receipts (egress.Receipts). It must not wait for a broker.
	OnDelivered func(route string, envs []*envelope.Envelope, confirmed time.Time)
	// Clock tells the broker-confirmed time for delivery_lateness and times the
	// max_rate waits and the shutdown drain (default clock.Real).
	Clock clock.Clock
	// Tracer, when set, gives each publish attempt a trace span and publishes the
	// message with that span's context (Tracer); nil = tracing off.
	Tracer Tracer
}

// Dispatcher takes batches fired by the wheel and publishes them through the route's
// sink, in parallel workers, honouring per-route max_rate. A route with a max_rate gets
// its own lane (queue and worker), so waiting for its rate never holds up the shared
// workers that serve every other route. Memory is bounded upstream: the scheduler only
// claims what its credits allow, so the queues here never hold more than
// scheduler.max_in_memory messages.
type Dispatcher struct {
	opt      DispatcherOptions
	limiters map[string]*rate.Limiter
	shared   *fifo
	lanes    map[string]*fifo // rate-limited routes

	stopping    atomic.Int64 // unix ns when Run's ctx ended; 0 while running
	unpublished atomic.Int64 // messages put back unpublished during shutdown
}

// NewDispatcher builds a dispatcher; Run starts its workers.
func NewDispatcher(opt DispatcherOptions) *Dispatcher {
	if opt.Workers <= 0 {
		opt.Workers = 4
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 1000
	}
	if opt.PublishTimeout <= 0 {
		opt.PublishTimeout = 10 * time.Second
	}
	if opt.Observer == nil {
		opt.Observer = observe.Nop{}
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	if opt.ShutdownDrain <= 0 {
		opt.ShutdownDrain = 5 * time.Second
	}
	d := &Dispatcher{opt: opt, limiters: map[string]*rate.Limiter{}, shared: newFIFO(opt.MaxBatch), lanes: map[string]*fifo{}}
	for name, rs := range opt.Routes {
		if rs.MaxRate > 0 {
			burst := int(rs.MaxRate / 10) // a tenth of a second's worth: smooth, not bursty
			if burst < 1 {
				burst = 1
			}
			d.limiters[name] = rate.NewLimiter(rate.Limit(rs.MaxRate), burst)
			d.lanes[name] = newFIFO(min(opt.MaxBatch, burst))
		}
	}
	return d
}

// Submit queues fired messages. It never blocks (the wheel goroutine calls it). The
// time of the call is taken as their fire time, for Observer.EgressWait.
func (d *Dispatcher) Submit(batch []*envelope.Envelope) {
	at := d.opt.Clock.Now().UnixNano()
	if len(d.lanes) == 0 {
		d.shared.put(batch, at)
		return
	}
	var shared []*envelope.Envelope
	byLane := map[*fifo][]*envelope.Envelope{}
	for _, env := range batch {
		if lane := d.lanes[env.Route]; lane != nil {
			byLane[lane] = append(byLane[lane], env)
		} else {
			shared = append(shared, env)
		}
	}
	for lane, envs := range byLane {
		lane.put(envs, at) // one lock per lane and batch, not per message
	}
	d.shared.put(shared, at)
}

// Len is the number of queued messages not yet taken by a worker.
func (d *Dispatcher) Len() int {
	n := d.shared.len()
	for _, lane := range d.lanes {
		n += lane.len()
	}
	return n
}

// Run publishes until ctx is done and the queues are empty. Shutdown order: the caller
// stops the wheel first, then cancels ctx; Run then finishes what is queued (each
// publish bounded by PublishTimeout; what is still queued after ShutdownDrain goes back
// unpublished) and returns.
func (d *Dispatcher) Run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		d.stopping.Store(d.opt.Clock.Now().UnixNano())
		d.shared.close()
		for _, lane := range d.lanes {
			lane.close()
		}
	})
	defer stop()
	var wg sync.WaitGroup
	work := func(q *fifo) {
		defer wg.Done()
		for {
			batch, ats := q.take()
			if batch == nil {
				return
			}
			d.dispatch(batch, ats)
		}
	}
	for i := 0; i < d.opt.Workers; i++ {
		wg.Add(1)
		go work(d.shared)
	}
	for _, lane := range d.lanes {
		wg.Add(1)
		go work(lane)
	}
	wg.Wait()
	if n := d.unpublished.Load(); n > 0 {
		d.opt.Logger.Info("shutdown: fired messages not published within the drain time went back to pending",
			"n", n, "drain", d.opt.ShutdownDrain)
	}
}

// drainOver reports whether Run's ctx ended more than ShutdownDrain ago.
func (d *Dispatcher) drainOver() bool {
	at := d.stopping.Load()
	return at != 0 && d.opt.Clock.Now().Sub(time.Unix(0, at)) > d.opt.ShutdownDrain
}

// fifo is a closable queue of fired messages taken in batches of up to max. ats holds
// each queued message's fire time (unix ns), index for index with items.
type fifo struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []*envelope.Envelope
	ats    []int64
	max    int
	closed bool
}

func newFIFO(max int) *fifo {
	q := &fifo{max: max}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *fifo) put(batch []*envelope.Envelope, at int64) {
	if len(batch) == 0 {
		return
	}
	q.mu.Lock()
	q.items = append(q.items, batch...)
	for range batch {
		q.ats = append(q.ats, at)
	}
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *fifo) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

func (q *fifo) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// take blocks until something is queued, and returns nil once closed and drained. ats
// are the fire times of batch, index for index.
func (q *fifo) take() (batch []*envelope.Envelope, ats []int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	n := min(len(q.items), q.max)
	if n == 0 {
		return nil, nil
	}
	batch = make([]*envelope.Envelope, n)
	ats = make([]int64, n)
	copy(batch, q.items)
	copy(ats, q.ats)
	rest := copy(q.items, q.items[n:])
	copy(q.ats, q.ats[n:])
	clear(q.items[rest:])
	q.items = q.items[:rest]
	q.ats = q.ats[:rest]
	return batch, ats
}

// dispatch publishes one batch, grouped by route (each route may have its own sink and
// rate); ats are the messages' fire times. Outcomes go to the completer with a context
// detached from shutdown, because recording an outcome must finish even while the
// bridge is stopping.
func (d *Dispatcher) dispatch(batch []*envelope.Envelope, ats []int64) {
	ctx := context.Background()
	for len(batch) > 0 {
		route := batch[0].Route
		group, groupAts := batch[:0:0], ats[:0:0]
		rest, restAts := batch[:0], ats[:0]
		for i, env := range batch {
			if env.Route == route {
				group = append(group, env)
				groupAts = append(groupAts, ats[i])
			} else {
				rest = append(rest, env)
				restAts = append(restAts, ats[i])
			}
		}
		batch, ats = rest, restAts
		if d.drainOver() {
			d.unpublished.Add(int64(len(group)))
			d.opt.Completer.Unpublished(group)
			continue
		}
		d.publishRoute(ctx, route, group, groupAts)
	}
}

func (d *Dispatcher) publishRoute(ctx context.Context, route string, envs []*envelope.Envelope, ats []int64) {
	rs, ok := d.opt.Routes[route]
	if !ok {
		errs := make([]error, len(envs))
		for i := range errs {
			errs[i] = fault.Permanent(fmt.Errorf("route %q is not configured on this instance", route))
		}
		d.failed(ctx, route, "", envs, errs)
		return
	}
	if lim := d.limiters[route]; lim != nil {
		d.throttle(ctx, lim, len(envs))
	}
	now := d.opt.Clock.Now().UnixNano()
	for _, at := range ats {
		d.opt.Observer.EgressWait(route, time.Duration(now-at))
	}
	// Ownership is checked after the rate limiter's wait, right before publishing: a
	// throttled message whose shard moved meanwhile is left to the new owner.
	if envs, ats = d.owned(route, rs.Broker, envs, ats); len(envs) == 0 {
		return
	}
	if d.opt.AtMostOnce {
		d.opt.Completer.Published(ctx, envs)
	}
	errs, start, confirmed := d.publish(ctx, rs, envs, ats)
	took := confirmed.Sub(start)
	var okEnvs, failEnvs []*envelope.Envelope
	var failErrs []error
	for i, err := range errs {
		if err == nil {
			okEnvs = append(okEnvs, envs[i])
		} else {
			failEnvs = append(failEnvs, envs[i])
			failErrs = append(failErrs, err)
		}
	}
	if len(okEnvs) > 0 {
		d.opt.Observer.Published(route, rs.Broker, len(okEnvs), took)
		for _, env := range okEnvs {
			d.opt.Observer.Delivered(route, confirmed.Sub(time.UnixMilli(env.DueAt)))
		}
		if !d.opt.AtMostOnce {
			d.opt.Completer.Published(ctx, okEnvs)
		}
		if d.opt.OnDelivered != nil {
			d.opt.OnDelivered(route, okEnvs, confirmed)
		}
	}
	if len(failEnvs) > 0 {
		d.failed(ctx, route, rs.Broker, failEnvs, failErrs)
	}
}

// publish hands envs to the route's sink, bounded by PublishTimeout, and returns one
// error per message (a sink breaking its contract fails them all: retried, never lost),
// with the times the publish started and was answered. With a Tracer, each message
// is published as a copy carrying its span's trace context, and the span ends here.
func (d *Dispatcher) publish(ctx context.Context, rs RouteSink, envs []*envelope.Envelope, ats []int64) (errs []error, start, confirmed time.Time) {
	pctx, cancel := context.WithTimeout(ctx, d.opt.PublishTimeout)
	defer cancel()
	start = d.opt.Clock.Now()
	send, ends := envs, []func(time.Time, error){}
	if d.opt.Tracer != nil {
		send, ends = make([]*envelope.Envelope, len(envs)), make([]func(time.Time, error), len(envs))
		for i, env := range envs {
			c := *env
			c.Headers, ends[i] = d.opt.Tracer.Start(env, rs.Broker, time.Unix(0, ats[i]), start)
			send[i] = &c
		}
	}
	errs = rs.Sink.Publish(pctx, send)
	confirmed = d.opt.Clock.Now()
	if d.opt.Tracer != nil {
		for i := range envs { // where the copy landed is where the message did (receipts)
			envs[i].Placed = send[i].Placed
		}
	}
	if len(errs) != len(envs) {
		bad := fmt.Errorf("sink returned %d results for %d messages", len(errs), len(envs))
		errs = make([]error, len(envs))
		for i := range errs {
			errs[i] = bad
		}
	}
	for i, end := range ends {
		end(confirmed, errs[i])
	}
	return errs, start, confirmed
}

// throttle waits, on the dispatcher's clock, until lim grants n messages, taking
// tokens in chunks no larger than the burst.
func (d *Dispatcher) throttle(ctx context.Context, lim *rate.Limiter, n int) {
	for left := n; left > 0; {
		k := min(left, lim.Burst())
		r := lim.ReserveN(d.opt.Clock.Now(), k) // k ≤ burst: always granted
		if clock.Sleep(ctx, d.opt.Clock, r.DelayFrom(d.opt.Clock.Now())) != nil {
			r.CancelAt(d.opt.Clock.Now())
			return
		}
		left -= k
	}
}

// owned keeps the messages this instance may still publish (see Owned); the others are
// handed to the completer's Dropped and counted as failed attempts for reason fenced.
// ats (the fire times, index for index) are filtered alike.
func (d *Dispatcher) owned(route, broker string, envs []*envelope.Envelope, ats []int64) ([]*envelope.Envelope, []int64) {
	if d.opt.Owned == nil {
		return envs, ats
	}
	kept, keptAts := envs[:0:0], ats[:0:0]
	var dropped []*envelope.Envelope
	for i, env := range envs {
		if d.opt.Owned(env) {
			kept = append(kept, env)
			keptAts = append(keptAts, ats[i])
		} else {
			dropped = append(dropped, env)
		}
	}
	if len(dropped) > 0 {
		d.opt.Observer.PublishFailed(route, broker, observe.FailFenced, len(dropped))
		d.opt.Completer.Dropped(dropped)
	}
	return kept, keptAts
}

// failed counts failed publish attempts by reason and hands them to the completer, or,
// at most once (already acknowledged), counts and logs them as dropped.
func (d *Dispatcher) failed(ctx context.Context, route, broker string, envs []*envelope.Envelope, errs []error) {
	byReason := map[string]int{}
	for _, err := range errs {
		byReason[FailReason(err)]++
	}
	for reason, n := range byReason {
		d.opt.Observer.PublishFailed(route, broker, reason, n)
	}
	if d.opt.AtMostOnce {
		// Already acknowledged: at-most-once gives up what the broker did not confirm.
		for reason, n := range byReason {
			d.opt.Observer.Dropped(route, reason, n)
		}
		d.opt.Logger.Warn("publish failed; messages dropped (delivery: at-most-once)", "route", route,
			"broker", broker, "dropped", len(envs), "first_id", envs[0].ID, "err", errs[0])
		return
	}
	d.opt.Logger.Warn("publish failed", "route", route, "broker", broker, "failed", len(envs), "err", errs[0])
	d.opt.Completer.Failed(ctx, envs, errs)
}
