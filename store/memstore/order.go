package memstore

import (
	"context"
	"sort"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Strict per-key order, as the Redis store's ordered_* scripts keep it (lua/includes/order.lua,
// storeapi/order.go): per shard, each ordered key's messages in (due, receive
// sequence) order; only the head is claimable, the others wait in due at GateBase +
// due; the next becomes the head when the head is acked, dead-lettered or cancelled.

type keyMsg struct {
	due, seq int64
}

type keyQueue struct {
	msgs    map[string]keyMsg // id -> due and receive sequence
	head    string
	claimed bool // the head was claimed (retried or recovered): it stays the head
}

// order is a shard's per-key state.
type order struct {
	queues map[string]*keyQueue // route "\x00" key -> queue
	of     map[string]string    // id -> its queue's name
	seq    int64
}

func newOrder() order {
	return order{queues: map[string]*keyQueue{}, of: map[string]string{}}
}

// ShardOfEnv is the shard of e: the one it was claimed from, else the shard of its
// ordering key on an ordered route, else ShardOf(e.ID).
func (s *Store) ShardOfEnv(e *envelope.Envelope) int {
	if e.ClaimedFrom > 0 {
		return e.ClaimedFrom - 1
	}
	return s.ord.ShardOf(e, s.opt.Shards)
}

// where is the shard holding id's envelope: ShardOf(id), or with ordered routes
// whichever shard has it (as the Redis store's locate); ShardOf(id) when none has.
func (s *Store) where(id string) int {
	n := s.ShardOf(id)
	if _, ok := s.shards[n].msg[id]; ok || len(s.ord) == 0 {
		return n
	}
	for i, sh := range s.shards {
		if _, ok := sh.msg[id]; ok {
			return i
		}
	}
	if _, ok := s.shards[n].done[id]; ok {
		return n
	}
	for i, sh := range s.shards { // delivered or cancelled: remembered in its key's shard
		if _, ok := sh.done[id]; ok {
			return i
		}
	}
	return n
}

// oadd queues id, just parked at due d, behind its key kz (as order.lua's oadd).
func (s *Store) oadd(n int, id string, d int64, kz string) {
	sh := s.shards[n]
	o := &sh.order
	o.seq++
	q := o.queues[kz]
	if q == nil {
		q = &keyQueue{msgs: map[string]keyMsg{}}
		o.queues[kz] = q
	}
	q.msgs[id] = keyMsg{due: d, seq: o.seq}
	o.of[id] = kz
	sh.due[id] = storeapi.GateBase + d
	if _, live := q.msgs[q.head]; q.head == "" || !live {
		s.opromote(n, kz)
		return
	}
	if hd, pending := sh.due[q.head]; !q.claimed && pending && hd < storeapi.GateBase && d < q.msgs[q.head].due {
		sh.due[q.head] = storeapi.GateBase + q.msgs[q.head].due
		q.head = id
		sh.due[id] = d
	}
}

// opromote makes the next live message of kz its head, at its due time.
func (s *Store) opromote(n int, kz string) {
	sh := s.shards[n]
	q := sh.order.queues[kz]
	for q != nil && len(q.msgs) > 0 {
		ids := make([]string, 0, len(q.msgs))
		for id := range q.msgs {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool {
			a, b := q.msgs[ids[i]], q.msgs[ids[j]]
			return a.due < b.due || a.due == b.due && a.seq < b.seq
		})
		id := ids[0]
		if _, ok := sh.msg[id]; !ok {
			delete(q.msgs, id)
			delete(sh.order.of, id)
			continue
		}
		q.head, q.claimed = id, false
		if _, ok := sh.due[id]; ok {
			sh.due[id] = q.msgs[id].due
		}
		if old, ok := s.woke[n]; !ok || q.msgs[id].due < old {
			s.woke[n] = q.msgs[id].due
		}
		return
	}
	delete(sh.order.queues, kz)
}

// ogone: id left its key (acked, dead, cancelled); a head is replaced.
func (s *Store) ogone(n int, id string) {
	sh := s.shards[n]
	kz, ok := sh.order.of[id]
	if !ok {
		return
	}
	delete(sh.order.of, id)
	q := sh.order.queues[kz]
	delete(q.msgs, id)
	if q.head == id {
		s.opromote(n, kz)
	}
}

// oclaimed marks id's key's head as claimed (back from a claim: retry, recover).
func (s *Store) oclaimed(n int, id string) {
	sh := s.shards[n]
	if kz, ok := sh.order.of[id]; ok && sh.order.queues[kz].head == id {
		sh.order.queues[kz].claimed = true
	}
}

// isOrdered reports whether id waits in a key's order (pending or in flight).
func (s *Store) isOrdered(n int, id string) bool {
	_, ok := s.shards[n].order.of[id]
	return ok
}

// takeWake returns and clears the heads promoted since the last call (under mu).
func (s *Store) takeWake() map[int]int64 {
	if len(s.woke) == 0 {
		return nil
	}
	w := s.woke
	s.woke = map[int]int64{}
	return w
}

// wakeUp publishes the promoted heads (outside mu), as the Redis store does.
func (s *Store) wakeUp(ctx context.Context, w map[int]int64) {
	if len(w) > 0 {
		_ = s.PublishWake(ctx, w)
	}
}

// keyOf is e's key queue name ("" when e is nil or not ordered).
func (s *Store) keyOf(e *envelope.Envelope) string {
	if e == nil {
		return ""
	}
	if k := s.ord.Key(e); k != "" {
		return e.Route + "\x00" + k
	}
	return ""
}

// KeyMessages returns what is pending or in flight for route's key, in the key's order.
func (s *Store) KeyMessages(ctx context.Context, route, key string) ([]storeapi.KeyMessage, error) {
	after, err := s.begin(ctx, OpGet)
	if err != nil {
		return nil, err
	}
	if !s.ord[route] || key == "" {
		return nil, after
	}
	n := storeapi.ShardOfKey(route, key, s.opt.Shards)
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.shards[n].order.queues[route+"\x00"+key]
	if q == nil {
		return nil, after
	}
	ids := make([]string, 0, len(q.msgs))
	for id := range q.msgs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := q.msgs[ids[i]], q.msgs[ids[j]]
		return a.due < b.due || a.due == b.due && a.seq < b.seq
	})
	var out []storeapi.KeyMessage
	for _, id := range ids {
		st, score, e, err := s.get(id)
		if err != nil || e == nil || (st != storeapi.StatePending && st != storeapi.StateInflight) {
			continue
		}
		out = append(out, storeapi.KeyMessage{Env: e, State: st, Score: score, Head: id == q.head})
	}
	return out, after
}
