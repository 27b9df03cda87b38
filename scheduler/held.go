package scheduler

import (
	"sync"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler/wheel"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// heldSet is one shard's messages in memory.
type heldSet struct {
	mu   sync.Mutex
	n    int                 // copies in memory, including superseded ones
	byID map[string]heldCopy // the latest claim of each id
	peak int                 // the most entries byID held since it was made (shrink)
}

// heldShrinkMin is the peak below which a held set's map is never rebuilt: small maps
// cost little, and a steady flow keeps its map near one size.
const heldShrinkMin = 4096

// shrink rebuilds byID once it holds at most an eighth of its peak. Go maps keep the
// memory their largest size took, and each shard has a set: without it the sets would
// keep, together, what every shard held at its own peak (a burst in one shard after
// another), however little they hold now. The copy costs at most the entries left, an
// eighth of those that left since the peak. Called with mu held, after a removal.
func (h *heldSet) shrink() {
	if h.peak < heldShrinkMin || len(h.byID) > h.peak/8 {
		return
	}
	m := make(map[string]heldCopy, len(h.byID))
	for id, c := range h.byID {
		m[id] = c
	}
	h.byID, h.peak = m, len(m)
}

// heldCopy is one claimed copy of a message: the envelope the claim returned (its
// pointer identifies the copy), the lease token it was claimed under and its handle in
// the wheel (written by Wheel.ScheduleBatch; read only through Wheel.Cancel). The held
// set is the one index of claimed messages by id: the wheel keeps none.
type heldCopy struct {
	env   *envelope.Envelope
	token int64
	wh    *wheel.Handle
}

// Owns reports whether env may be published: it is the latest claim of its id, its
// shard's lease is still held under the token it was claimed with, and the lease is
// surely still valid. The dispatcher drops (does not publish) anything else, e.g. after
// this process was frozen past its lease, or a copy superseded by a re-claim after this
// instance lost and re-acquired the shard: whoever owns the shard recovers and fires
// those from `inflight`, so a frozen instance waking up does not publish a second copy.
//
// The copy's claim mark (track) answers the first two without a lookup in the held
// set: a copy is the latest claim of its id until a later claim supersedes it, and
// leaves the held set otherwise only when it finished or when it was taken out of the
// wheel (never fired).
func (s *Scheduler) Owns(env *envelope.Envelope) bool {
	c := env.Claim
	if c == nil || c.Superseded() {
		return false
	}
	st := s.state(s.store.ShardOfEnv(env))
	return st != nil && s.leaseValid(st) && c.Token == st.token
}

// track records claimed messages as held under st's token before they enter the wheel,
// and marks each copy with that token (Owns). A message already held (claimed again
// after a recovery) supersedes the older copy: if that copy is still in the wheel it is
// taken out, otherwise it is on its way to egress, where Owns drops it. It returns the
// items' wheel handles for Wheel.ScheduleBatch to fill in.
func (s *Scheduler) track(st *shardState, items []*envelope.Envelope) []wheel.Handle {
	h := &s.held[st.shard]
	replaced, replacedBytes := 0, int64(0)
	marks := make([]envelope.ClaimMark, len(items))
	handles := make([]wheel.Handle, len(items))
	h.mu.Lock()
	for i, env := range items {
		old, ok := h.byID[env.ID]
		if ok {
			old.env.Claim.Supersede()
		}
		if ok && s.wheel.Cancel(old.wh) {
			h.n--
			replaced++
			replacedBytes += old.env.ClaimedBytes
		}
		marks[i].Token = st.token
		env.Claim = &marks[i]
		h.byID[env.ID] = heldCopy{env: env, token: st.token, wh: &handles[i]}
		h.n++
	}
	h.peak = max(h.peak, len(h.byID))
	h.mu.Unlock()
	s.credits.release(replaced, replacedBytes)
	return handles
}

// untrack forgets one copy that left memory (published, failed, dropped, put back) and
// reports whether it was the latest claim of its id, and that claim's token.
func (s *Scheduler) untrack(shard int, env *envelope.Envelope) (current bool, token int64) {
	h := &s.held[shard]
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if c, ok := h.byID[env.ID]; ok && c.env == env {
		delete(h.byID, env.ID)
		h.shrink()
		return true, c.token
	}
	return false, 0
}

// takeFromWheel removes from the wheel every message of st's shard claimed under st's
// token and returns them, no longer held. Credits are the caller's to return.
func (s *Scheduler) takeFromWheel(st *shardState) []*envelope.Envelope {
	h := &s.held[st.shard]
	var out []*envelope.Envelope
	h.mu.Lock()
	for id, c := range h.byID {
		if c.token == st.token && s.wheel.Cancel(c.wh) {
			delete(h.byID, id)
			h.n--
			out = append(out, c.env)
		}
	}
	h.shrink()
	h.mu.Unlock()
	return out
}

func (s *Scheduler) heldCount(shard int) int {
	h := &s.held[shard]
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// CancelLocal removes id from the wheel if this instance holds it there, returning
// whether it did. The store's cancel has already removed it from Redis.
//
// The wheel only ever holds the latest claim of an id (track takes older copies out),
// held under its shard: ShardOf(id), looked in first, or for a message of an ordered key
// its key's shard, which the id does not tell. So an id this instance does not hold is
// looked for in every shard's held set: a cancel of a message in flight is rare, and
// what it costs (one map lookup per shard) is not paid per message fired.
func (s *Scheduler) CancelLocal(id string) bool {
	for i, n := s.store.ShardOf(id), 0; n < len(s.held); i, n = (i+1)%len(s.held), n+1 {
		h := &s.held[i]
		h.mu.Lock()
		c, ok := h.byID[id]
		if !ok {
			h.mu.Unlock()
			continue
		}
		if !s.wheel.Cancel(c.wh) {
			h.mu.Unlock()
			return false // fired already: on its way to egress
		}
		h.n--
		delete(h.byID, id)
		h.shrink()
		h.mu.Unlock()
		s.credits.release(1, c.env.ClaimedBytes)
		return true
	}
	return false
}

// ReleaseLocal takes id out of the wheel if this instance holds it there (claimed,
// not fired yet) and puts that copy back through the store with the outcomes written
// at the next lease renewal (as orphans: RetryItem at its fire time), returning
// whether it did. Put back, an id with a replace's successor gives way to it (the
// successor becomes pending, the copy is not fired); one without is pending again,
// unchanged; one no longer in flight (cancelled) is left alone by the store. The
// cancel channel calls it on every instance.
func (s *Scheduler) ReleaseLocal(id string) bool {
	shard := s.store.ShardOf(id)
	h := &s.held[shard]
	h.mu.Lock()
	c, ok := h.byID[id]
	if !ok || !s.wheel.Cancel(c.wh) {
		h.mu.Unlock()
		return false
	}
	h.n--
	delete(h.byID, id)
	h.shrink()
	h.mu.Unlock()
	s.credits.release(1, c.env.ClaimedBytes)
	if st := s.state(shard); st != nil && st.token == c.token {
		st.addOrphans(storeapi.RetryItem{Env: c.env, Due: c.env.FireTime()})
	}
	return true
}

func (st *shardState) addOrphans(items ...storeapi.RetryItem) {
	st.omu.Lock()
	st.orphans = append(st.orphans, items...)
	st.omu.Unlock()
}

func (st *shardState) takeOrphans() []storeapi.RetryItem {
	st.omu.Lock()
	defer st.omu.Unlock()
	out := st.orphans
	st.orphans = nil
	return out
}

// InMemory is what a scheduler holds in memory at one moment, for tests and diagnostics.
type InMemory struct {
	Wheel       int   // messages pending in the wheel
	FreeCredits int   // credits not taken (Options.MaxInMemory when nothing is held)
	Held        []int // per shard: claimed copies not finished yet (wheel and egress)
	HeldBytes   int64 // their bytes (envelope.ClaimedBytes), against Options.MaxInMemoryBytes
}

// MemoryStats reports the bytes held against the byte budget, the claims it held
// back and the messages claimed at park and by the pumps, for metrics.
func (s *Scheduler) MemoryStats() CreditStats {
	st := s.credits.stats()
	st.ClaimedAtPark, st.ClaimedByPump = s.claimedAtPark.Load(), s.claimedByPump.Load()
	return st
}

// InMemory reports what the scheduler holds in memory now.
func (s *Scheduler) InMemory() InMemory {
	out := InMemory{Wheel: s.wheel.Len(), FreeCredits: s.credits.available(), Held: make([]int, len(s.held)),
		HeldBytes: s.credits.stats().HeldBytes}
	for i := range s.held {
		out.Held[i] = s.heldCount(i)
	}
	return out
}
