// Package wheel is a hashed timing wheel (docs/CONTRACT.md §4): the in-process timer
// between the pump, which claims due envelopes from Redis, and egress. One goroutine and one lock for any number of pending
// messages, instead of a runtime timer per message, which collapses at 10k msgs/s
// (docs/CONTRACT.md §8); everything due in one tick reaches egress as one batch. It
// knows nothing of Redis or brokers: the scheduler feeds it and receives its batches.
package wheel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// FireFunc receives the envelopes that became due in one tick.
//
// It runs on the wheel goroutine with no wheel lock held, so it may call Schedule or
// Cancel. While it runs no further tick is processed: a slow FireFunc makes later
// messages late rather than piling them up in memory, so it should hand the batch to a
// batching egress, not publish message by message.
//
// batch is allocated for this call and belongs to the callee (it may be kept or passed to
// another goroutine). It is ordered by fire time, then by the time ingress received each
// message (ms), then by the order they were scheduled: messages of one key due at the
// same time, which sit on different shards and reach the wheel in whatever order the
// shards' pumps claim them, come out in the order the bridge received them. now is the
// clock reading at which the tick was processed; now − DueAt is the fire lateness.
type FireFunc func(batch []*envelope.Envelope, now time.Time)

const (
	defaultTick  = time.Millisecond
	defaultSlots = 4096

	// Released entries are recycled so that a steady schedule/fire flow does not allocate
	// per message. The cap bounds what a burst leaves behind (64k entries ≈ 3 MB).
	maxFree = 1 << 16
)

// entry is one pending envelope, an intrusive node of its bucket's list so that
// Cancel unlinks it in O(1).
type entry struct {
	env        *envelope.Envelope
	tick       int64 // absolute tick number at whose processing the envelope is due
	slot       int   // index in Wheel.buckets, or -1 for Wheel.overdue
	prev, next *entry
	gen        uint64 // incremented each time the entry leaves the wheel (Handle)
}

// Handle names one scheduled envelope for Cancel. The zero Handle names none. A handle
// whose envelope has fired, was cancelled or was drained cancels nothing, even once its
// entry is recycled for another envelope (the entry's generation has moved on).
//
// The wheel keeps no index of its own: the caller keeps each envelope's handle where it
// already looks the message up (the scheduler's held set, by id), so a scheduled and
// fired message costs no map insertion, lookup or deletion here: each touched a map of
// every message held and an id decoded seconds earlier, both out of cache
// (docs/ARCHITECTURE.md "The scheduler", Wheel).
type Handle struct {
	e   *entry
	gen uint64
}

// slotList is a FIFO list of entries.
type slotList struct {
	head, tail *entry
	n          int
	// minTick is a lower bound of the ticks held (math.MaxInt64 when empty). It is exact
	// after each processing of the bucket; Cancel leaves it possibly too low, which at
	// worst costs one wake-up that finds nothing and makes it exact again.
	minTick int64
}

// Wheel is a hashed timing wheel à la Netty's HashedWheelTimer.
//
// Time is cut into ticks; absolute tick t covers (t−1)·tick, t·tick] and is processed once
// the clock reads at least t·tick, so an envelope due at d ms is placed at tick
// ⌈d/tick⌉ and never fires before d. Tick t lives in slot t mod slots. Instead of
// Netty's remaining-rounds counter each entry keeps its absolute tick (the same thing:
// rounds = (tick − current) / slots), which stays right when the loop skips idle ticks or
// catches up after a pause. Processing a slot fires the entries whose tick has come and
// leaves the later rounds in place.
//
// The loop does not wake every tick: it sleeps until the earliest pending tick, found with
// an occupancy bitmap and per-slot minimum ticks, and not at all while the wheel is empty;
// a Schedule earlier than the armed wake-up wakes it through a channel.
//
// All methods are safe for concurrent use; Run must not be called twice at once.
type Wheel struct {
	clk    clock.Clock
	tickNs int64
	mask   int64
	fire   FireFunc
	maxDue int64 // largest DueAt (ms) whose tick arithmetic cannot overflow

	wake    chan struct{} // capacity 1: a pending signal is never lost, extra ones coalesce
	running atomic.Bool
	size    atomic.Int64 // mirrors the entry count so Len needs no lock

	mu      sync.Mutex
	buckets []slotList
	occ     []uint64 // bit s set ⇔ buckets[s] is non-empty
	overdue slotList // entries already due when scheduled: fired at the next tick
	cur     int64    // last processed tick; every entry outside overdue has tick > cur
	// nextWake is the tick the loop sleeps until (math.MaxInt64: no timer armed), or
	// math.MinInt64 while it is awake and will look again before sleeping. Schedule
	// signals wake only for an entry earlier than this, so a busy producer costs no
	// channel operations.
	nextWake int64
	free     *entry
	nfree    int

	// testHookParked, set only by tests, is called each time Run is about to block, with
	// whether a timer is armed and its duration: tests synchronise on it instead of
	// sleeping.
	testHookParked func(armed bool, d time.Duration)
}

// Options configure a Wheel. Zero values take the defaults (see withDefaults).
type Options struct {
	// Clock drives the wheel; default clock.Real.
	Clock clock.Clock
	// Tick is the wheel's resolution; ≤ 0 means 1 ms.
	Tick time.Duration
	// Slots is rounded up to a power of two; ≤ 0 means 4096, at most 2^30. Slots·Tick is
	// one rotation: entries further out wait for later rounds and cost a little when
	// their slot is processed, so one rotation should cover the typical claim lookahead.
	Slots int
	// Fire receives each tick's due envelopes (required).
	Fire FireFunc
}

// maxSlots bounds Options.Slots (the bucket array is allocated up front).
const maxSlots = 1 << 30

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Tick <= 0 {
		o.Tick = defaultTick
	}
	if o.Slots <= 0 {
		o.Slots = defaultSlots
	}
	return o
}

// Validate reports options New cannot use (after defaults are filled in).
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Fire == nil:
		return errors.New("wheel: Options.Fire is required")
	case o.Slots > maxSlots:
		return fmt.Errorf("wheel: Options.Slots %d is above %d", o.Slots, maxSlots)
	}
	return nil
}

// New returns a wheel that calls opt.Fire with each tick's due envelopes once Run is
// running. It fills opt's defaults and refuses invalid options (Validate).
func New(opt Options) (*Wheel, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	opt = opt.withDefaults()
	clk, tick := opt.Clock, opt.Tick
	n := 1 << bits.Len(uint(opt.Slots-1)) // next power of two ≥ slots
	w := &Wheel{
		clk:      clk,
		tickNs:   int64(tick),
		mask:     int64(n - 1),
		fire:     opt.Fire,
		maxDue:   (math.MaxInt64 - int64(tick)) / int64(time.Millisecond),
		wake:     make(chan struct{}, 1),
		buckets:  make([]slotList, n),
		occ:      make([]uint64, (n+63)/64),
		overdue:  slotList{minTick: math.MaxInt64},
		nextWake: math.MaxInt64,
	}
	for i := range w.buckets {
		w.buckets[i].minTick = math.MaxInt64
	}
	w.cur = floorDiv(clk.Now().UnixNano(), w.tickNs)
	return w, nil
}

// Schedule adds env, due at its fire time (unix ms), and returns its handle for
// Cancel. An envelope already due fires at the next tick. The wheel does not look at
// ids: the same message scheduled twice fires twice unless the caller cancels the
// first copy (the scheduler does, when a message is claimed again).
func (w *Wheel) Schedule(env *envelope.Envelope) Handle {
	t := w.tickOf(env.FireTime())
	w.mu.Lock()
	var h Handle
	w.wakeIfEarlierLocked(w.insertLocked(env, t, &h))
	w.mu.Unlock()
	return h
}

// ScheduleBatch is Schedule for many envelopes under one lock acquisition, the way the
// pump hands over a claimed batch. hs is nil or holds one handle per envelope, which
// ScheduleBatch writes under the wheel's lock (Cancel reads it under the same lock, so
// a caller may hand a handle's address to another goroutine before this returns).
func (w *Wheel) ScheduleBatch(envs []*envelope.Envelope, hs []Handle) {
	if len(envs) == 0 {
		return
	}
	w.mu.Lock()
	earliest := int64(math.MaxInt64)
	for i, env := range envs {
		var h *Handle
		if hs != nil {
			h = &hs[i]
		}
		if eff := w.insertLocked(env, w.tickOf(env.FireTime()), h); eff < earliest {
			earliest = eff
		}
	}
	w.wakeIfEarlierLocked(earliest)
	w.mu.Unlock()
}

// Cancel removes the pending envelope h names and reports whether there was one; it
// then clears h. An envelope already handed to fire is no longer pending: Cancel
// returns false. h may be nil.
func (w *Wheel) Cancel(h *Handle) bool {
	if h == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e := h.e
	if e == nil || e.gen != h.gen {
		return false
	}
	*h = Handle{}
	w.unlinkLocked(e)
	w.releaseLocked(e)
	return true
}

// Len is the number of pending envelopes.
func (w *Wheel) Len() int { return int(w.size.Load()) }

// Drain removes and returns every pending envelope, in no particular order, for the
// caller to give back (Run never fires what it still holds when it returns). Call it
// after Run has returned, or the loop may fire envelopes concurrently with the drain.
func (w *Wheel) Drain() []*envelope.Envelope {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*envelope.Envelope, 0, w.size.Load())
	take := func(b *slotList) {
		for e := b.head; e != nil; e = e.next {
			out = append(out, e.env)
			e.gen++ // its handle cancels nothing now
		}
		*b = slotList{minTick: math.MaxInt64}
	}
	take(&w.overdue)
	for s := range w.buckets {
		if w.buckets[s].head != nil {
			take(&w.buckets[s])
		}
	}
	clear(w.occ)
	w.free, w.nfree = nil, 0
	w.size.Store(0)
	return out
}

// Run is the tick loop: it fires due envelopes until ctx is done. Envelopes still pending
// then stay in the wheel, unfired; take them with Drain. Ticks missed while the process
// was paused or the clock jumped are processed one by one, in order, as soon as Run
// notices; ticks with nothing due cost nothing.
func (w *Wheel) Run(ctx context.Context) {
	if !w.running.CompareAndSwap(false, true) {
		panic("scheduler: Wheel.Run called while already running")
	}
	defer w.running.Store(false)

	var timer clock.Timer // one timer, re-armed, so sleeping does not allocate
	armed := false
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ctx.Err() != nil {
			return
		}
		now := w.clk.Now()
		batch, processed, next := w.step(now)
		if processed {
			if len(batch) > 0 {
				w.fire(batch, now)
			}
			continue
		}

		if next == math.MaxInt64 { // empty: no timer at all, only a Schedule wakes us
			if armed {
				timer.Stop()
				armed = false
			}
			if w.testHookParked != nil {
				w.testHookParked(false, 0)
			}
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
			continue
		}

		// step guarantees next > the current tick, so d > 0: no busy loop.
		d := time.Duration(next*w.tickNs - now.UnixNano())
		if timer == nil {
			timer = w.clk.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		armed = true
		if w.testHookParked != nil {
			w.testHookParked(true, d)
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C():
			armed = false
		}
	}
}

// step processes the earliest tick that has come by now, if any, returning its due
// envelopes (nil when none after all) and processed = true; the caller fires them and
// calls step again. Otherwise it returns processed = false and the tick to sleep until
// (math.MaxInt64 when the wheel is empty). Run is step plus sleeping; tests and
// benchmarks drive step directly.
func (w *Wheel) step(now time.Time) (batch []*envelope.Envelope, processed bool, next int64) {
	batch, processed, next = w.stepLocked(now)
	if len(batch) > 1 { // outside the lock: Schedule need not wait for the sort
		slices.SortStableFunc(batch, fireOrder)
	}
	return batch, processed, next
}

// fireOrder orders a fired batch: by fire time, then receive time (see FireFunc).
func fireOrder(a, b *envelope.Envelope) int {
	return cmp.Or(cmp.Compare(a.FireTime(), b.FireTime()), cmp.Compare(a.ReceivedAt, b.ReceivedAt))
}

// stepLocked is step under the wheel lock, before the batch is ordered.
func (w *Wheel) stepLocked(now time.Time) (batch []*envelope.Envelope, processed bool, next int64) {
	nowTick := floorDiv(now.UnixNano(), w.tickNs)
	w.mu.Lock()
	defer w.mu.Unlock()
	if nowTick < w.cur {
		// The clock stepped back. Pending ticks are still > nowTick, and entries scheduled
		// from now on must be judged against the clock's new reading, not the old one.
		w.cur = nowTick
	}
	t := w.nextTickLocked()
	if t > nowTick {
		w.cur = nowTick // nothing pending in (cur, nowTick]: skip those ticks
		w.nextWake = t
		select { // t already accounts for whatever a pending signal was about
		case <-w.wake:
		default:
		}
		return nil, false, t
	}
	batch = w.collectLocked(t)
	w.cur = t
	w.nextWake = math.MinInt64 // awake: the loop looks again before it sleeps
	return batch, true, t
}

// nextTickLocked returns the earliest tick that may hold a due entry (possibly earlier
// than the true one after cancels, never later), or math.MaxInt64 when empty.
func (w *Wheel) nextTickLocked() int64 {
	if w.size.Load() == 0 {
		return math.MaxInt64
	}
	if w.overdue.head != nil {
		return w.cur + 1
	}
	// Walk occupied slots in rotation order from tick cur+1. Slot s stands for tick
	// cur+1+((s−start) mod slots) in this rotation; the first slot whose minimum is not
	// beyond that tick gives the answer, since every slot passed before it holds only
	// later rounds, which come after it. If no slot qualifies, every entry is at least a
	// rotation away and the smallest minimum is the answer.
	start := int((w.cur + 1) & w.mask)
	best := int64(math.MaxInt64)
	nw := len(w.occ)
	wi := start >> 6
	word := w.occ[wi] & (^uint64(0) << uint(start&63))
	for visit := 0; visit <= nw; visit++ {
		for word != 0 {
			s := wi<<6 | bits.TrailingZeros64(word)
			word &= word - 1
			t := w.cur + 1 + (int64(s-start) & w.mask)
			m := w.buckets[s].minTick
			if m <= t {
				return t
			}
			if m < best {
				best = m
			}
		}
		wi++
		if wi == nw {
			wi = 0
		}
		word = w.occ[wi]
		if visit == nw-1 { // back at the start word: only the slots before start remain
			word &= ^(^uint64(0) << uint(start&63))
		}
	}
	return best
}

// collectLocked unlinks and returns the entries due at tick t (the overdue slotList and slot
// t mod slots) and makes the slot's minimum exact again.
func (w *Wheel) collectLocked(t int64) []*envelope.Envelope {
	s := int(t & w.mask)
	b := &w.buckets[s]
	var batch []*envelope.Envelope
	for e := w.overdue.head; e != nil; {
		next := e.next
		w.unlinkLocked(e)
		if e.tick <= t {
			if batch == nil {
				batch = make([]*envelope.Envelope, 0, w.overdue.n+1+b.n)
			}
			batch = append(batch, e.env)
			w.releaseLocked(e)
		} else {
			// Only after the clock stepped back: the entry is not due yet after all.
			w.linkLocked(e, int(e.tick&w.mask))
		}
		e = next
	}
	if b.minTick > t {
		return batch // here for the overdue slotList only; the slot holds later rounds
	}
	minTick := int64(math.MaxInt64)
	for e := b.head; e != nil; {
		next := e.next
		if e.tick <= t {
			if batch == nil {
				batch = make([]*envelope.Envelope, 0, b.n)
			}
			batch = append(batch, e.env)
			w.unlinkLocked(e)
			w.releaseLocked(e)
		} else if e.tick < minTick {
			minTick = e.tick
		}
		e = next
	}
	b.minTick = minTick
	return batch
}

// insertLocked files env at tick t, writes its handle to h (when not nil) and returns
// the tick at which it will be processed.
func (w *Wheel) insertLocked(env *envelope.Envelope, t int64, h *Handle) int64 {
	e := w.free
	if e != nil {
		w.free = e.next
		w.nfree--
		e.next = nil
	} else {
		e = &entry{}
	}
	e.env, e.tick = env, t
	eff := t
	if t <= w.cur {
		// Its slot has been passed in this rotation; filing it there would delay it by a
		// whole rotation. The overdue slotList is part of the next tick processed.
		w.linkLocked(e, -1)
		eff = w.cur + 1
	} else {
		w.linkLocked(e, int(t&w.mask))
	}
	if h != nil {
		*h = Handle{e: e, gen: e.gen}
	}
	w.size.Add(1)
	return eff
}

func (w *Wheel) bucket(slot int) *slotList {
	if slot < 0 {
		return &w.overdue
	}
	return &w.buckets[slot]
}

// linkLocked appends e to a bucket's list (FIFO keeps same-tick messages in schedule
// order, which egress then preserves per partition or queue).
func (w *Wheel) linkLocked(e *entry, slot int) {
	b := w.bucket(slot)
	e.slot = slot
	e.prev, e.next = b.tail, nil
	if b.tail != nil {
		b.tail.next = e
	} else {
		b.head = e
		if slot >= 0 {
			w.occ[slot>>6] |= 1 << uint(slot&63)
		}
	}
	b.tail = e
	b.n++
	if e.tick < b.minTick {
		b.minTick = e.tick
	}
}

// unlinkLocked removes e from its bucket's list.
func (w *Wheel) unlinkLocked(e *entry) {
	b := w.bucket(e.slot)
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		b.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		b.tail = e.prev
	}
	e.prev, e.next = nil, nil
	b.n--
	if b.n == 0 {
		b.minTick = math.MaxInt64
		if e.slot >= 0 {
			w.occ[e.slot>>6] &^= 1 << uint(e.slot&63)
		}
	}
}

// releaseLocked forgets an unlinked entry and recycles it; its handles cancel nothing
// from now on.
func (w *Wheel) releaseLocked(e *entry) {
	e.gen++
	w.size.Add(-1)
	e.env = nil // do not keep the envelope alive from the free list
	if w.nfree < maxFree {
		e.next = w.free
		w.free = e
		w.nfree++
	}
}

// wakeIfEarlierLocked wakes the loop when tick t is earlier than its armed wake-up. The
// send happens under the lock, so when step, also under the lock, discards a pending
// signal before sleeping, that signal's entry is certain to have been seen: the loop
// never wakes for nothing.
func (w *Wheel) wakeIfEarlierLocked(t int64) {
	if t >= w.nextWake {
		return
	}
	w.nextWake = t
	select {
	case w.wake <- struct{}{}:
	default: // a signal is already pending; the loop will see this entry too
	}
}

// tickOf is the first tick at or after due ms: processing it can never be early.
func (w *Wheel) tickOf(dueMs int64) int64 {
	if dueMs > w.maxDue {
		dueMs = w.maxDue
	} else if dueMs < -w.maxDue {
		dueMs = -w.maxDue
	}
	return ceilDiv(dueMs*int64(time.Millisecond), w.tickNs)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}
