package store

import (
	"crypto/sha256"
	"fmt"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/lua"
	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

// Store layouts (docs/ARCHITECTURE.md "Store layout"). Layout 2 is the one of the
// releases before issue 17: the done window is a ZSET of ids plus a HASH of cancel
// routes. Layout 3 keeps it in the id index: small listpack sub-hashes keyed by a
// 12-byte fingerprint of the id, plus per-time-slice strings of the fingerprints for
// trimming. Both are read whatever the store writes, so a store written by either is
// served; the store writes layout 3 unless told otherwise (forceLayout).
const (
	layoutV2 = 2
	layoutV3 = 3
	// fpBytes is the fingerprint length: 96 bits of SHA-256(id). Two different ids of
	// one shard collide with probability 2^-96; with N ids remembered in a shard's
	// window a new id is taken for one of them with probability below N/2^96 (10^9:
	// 1.3*10^-20), and any collision at all among N ids has probability below
	// N^2/2^97 (10^9: 6.3*10^-12).
	fpBytes = 12
)

// byLayout are the scripts whose keys or arguments differ between the layouts.
type byLayout struct {
	park, bury, cancel, ack, get, reschedule *script
}

func newByLayout(v int) byLayout {
	if v == layoutV2 {
		mk := evalScript
		return byLayout{
			park: mk("v2/park", lua.V2Park), bury: mk("v2/bury", lua.V2Bury), cancel: mk("v2/cancel", lua.V2Cancel),
			ack: mk("v2/ack", lua.V2Ack), get: mk("v2/get", lua.V2Get), reschedule: mk("v2/reschedule", lua.V2Reschedule),
		}
	}
	mk := func(name string) *script { return newScript(name, name) }
	return byLayout{
		park: mk("park"), bury: mk("bury"), cancel: mk("cancel"),
		ack: mk("ack"), get: mk("get"), reschedule: mk("reschedule"),
	}
}

func (b byLayout) all() []*script {
	return []*script{b.park, b.bury, b.cancel, b.ack, b.get, b.reschedule}
}

// writing is the layout the store writes now: forced (tests, benchmarks), else 3 once
// every member of the bridge cluster records layout 3 (compat.go), else 2. Callers read
// it once per script call they build, so keys, arguments and script always agree.
func (s *Store) writing() int { return int(s.layout.Load()) }

// scripts is the script set of layout l.
func (s *Store) scriptsOf(l int) byLayout {
	if l == layoutV2 {
		return s.v2
	}
	return s.v3
}

// forceLayout makes the store write layout l whatever the members record (tests and
// benchmarks compare layouts).
func (s *Store) forceLayout(l int) error {
	if l != layoutV2 && l != layoutV3 {
		return fmt.Errorf("%w: unknown store layout %d", ErrInvalid, l)
	}
	s.forced.Store(true)
	s.layout.Store(int32(l))
	s.successors.Store(l == layoutV3)
	return nil
}

// fingerprint is the id's key in the layout-3 index: its first fpBytes of SHA-256.
func fingerprint(id string) string {
	sum := sha256.Sum256([]byte(id))
	return string(sum[:fpBytes])
}

// doneSliceMs is the width of a done slice: the least 1000*2^k ms at or above
// DoneWindow/32. An id is forgotten once the slice it was recorded in (the one holding
// its time) ends a DoneWindow in the past, so it is remembered for at least DoneWindow
// and at most DoneWindow plus one slice (plus the time the trim takes to reach it: each
// ack or cancel reads a bounded number). Whole seconds, because the index keeps times
// in seconds (index.lua).
func (s *Store) doneSliceMs() int64 {
	return storeapi.DoneSliceMs(s.opt.DoneWindow.Milliseconds())
}

// idKeys are the keys of the by-id scripts (get, cancel, reschedule) of shard sh (the
// shard holding id: locate) in layout l.
func (s *Store) idKeys(sh int, l int) []string {
	k := s.keys[sh]
	if l == layoutV2 {
		return []string{k.due, k.msg, k.inflight, k.dead, k.done, k.cancelled, k.counts}
	}
	return []string{k.due, k.msg, k.inflight, k.dead, k.done, k.cancelled, k.counts, k.ix, k.dn}
}

// getCall looks id up in shard sh (get.lua).
func (s *Store) getCall(sh int, id string) call {
	l := s.writing()
	keys := s.idKeys(sh, l)
	if l == layoutV2 {
		return call{sc: s.v2.get, keys: keys[:6], args: []any{id}}
	}
	return call{sc: s.v3.get, keys: withGuard(s.keys[sh], append(keys[:6:6], keys[7], s.keys[sh].nx)), args: []any{id, fingerprint(id)}}
}

// cancelCall cancels id in shard sh (cancel.lua; in layout 3 wrapped by
// ordered_cancel); remember, trimBefore and trimLimit as trimArgs.
func (s *Store) cancelCall(sh int, id string, now int64, remember int, trimBefore int64, trimLimit int, route, expected string, tomb int) call {
	l := s.writing()
	args := []any{id, now, remember, trimBefore, trimLimit, route, expected, tomb}
	if l == layoutV2 {
		return call{sc: s.v2.cancel, keys: s.idKeys(sh, l), args: args}
	}
	k := s.keys[sh]
	keys := append(s.idKeys(sh, l), k.nx, k.ko, k.ki)
	return call{sc: s.oCancel, keys: withGuard(k, keys), args: append(args, fingerprint(id), s.doneSliceMs())}
}

// rescheduleCall moves id of shard sh to due (reschedule.lua; in layout 3 wrapped by
// ordered_reschedule, kz being the key queue a requeued dead letter joins: queueOf);
// rest is the optional envelope and the score it was read at.
func (s *Store) rescheduleCall(sh int, id string, due int64, kz string, rest ...any) call {
	l := s.writing()
	if l == layoutV2 {
		return call{sc: s.v2.reschedule, keys: s.idKeys(sh, l), args: append([]any{id, due}, rest...)}
	}
	k := s.keys[sh]
	keys := append(s.idKeys(sh, l)[:8:8], k.ko, k.ki, kz)
	args := []any{id, due, fingerprint(id), "", ""} // ARGV[4], [5] optional: "" = not given
	copy(args[3:], rest)
	args = append(args, clock.NowMs(s.opt.Clock), s.coldHorizon())
	return call{sc: s.oReschedule, keys: withGuard(k, keys), args: args}
}

// parkKeys are the keys of park and bury on shard k in layout l.
func parkKeys(k shardKeys, l int) []string {
	if l == layoutV2 {
		return []string{k.due, k.msg, k.inflight, k.dead, k.done, k.cancelled, k.counts}
	}
	return withGuard(k, []string{k.due, k.msg, k.inflight, k.dead, k.done, k.cancelled, k.counts, k.ix, k.dn})
}
