package redisstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// fpBytes is the fingerprint length of the id index (lua/includes/index.lua): 96 bits of
// SHA-256(id). Two different ids of one shard collide with probability 2^-96; with N ids
// remembered in a shard's window a new id is taken for one of them with probability
// below N/2^96 (10^9: 1.3*10^-20), and any collision at all among N ids has probability
// below N^2/2^97 (10^9: 6.3*10^-12).
const fpBytes = 12

// kbSlot is the bytes of one offset's slot in a Kafka block's string (KB_SLOT in
// lua/includes/index.lua): the record hash (6) and the time delivered (4).
const kbSlot = 10

// zeroFP stands for the index key of a Kafka default id in an ack (ackFingerprint).
var zeroFP [fpBytes]byte

// fingerprint is the id's key in the id index: its first fpBytes of SHA-256. An id of
// the Kafka default form (storeapi.KafkaOffset) also carries where its block remembers
// it delivered (lua/includes/index.lua): its slot in the block (2 bytes big endian), its
// record hash (6 bytes) and the block's name "<topic>/<partition>/<offset / ShardBlock>".
func fingerprint(id string) string {
	return fingerprintOf(id, true)
}

// ackFingerprint is what ack.lua gets for id: the fingerprint, except that a Kafka
// default id's first fpBytes are zero rather than its SHA-256. Ack records such an id
// in its block's slot alone (kbdone), never under the index key those bytes name (a
// delivered slot wins over a tombstone there), so the bridge does not hash each id it
// acknowledges.
func ackFingerprint(id string) string {
	return fingerprintOf(id, false)
}

func fingerprintOf(id string, kafkaIndexKey bool) string {
	prefix, offset, hash, ok := storeapi.KafkaOffset(id)
	if !ok {
		sum := sha256Of(id)
		return string(sum[:fpBytes])
	}
	// Built in a buffer on the stack (it runs for every message parked and acknowledged):
	// the string is the one allocation.
	var buf [128]byte
	b := buf[:0]
	if kafkaIndexKey {
		sum := sha256Of(id)
		b = append(b, sum[:fpBytes]...)
	} else {
		b = append(b, zeroFP[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(offset%storeapi.ShardBlock))
	b, _ = hex.AppendDecode(b, []byte(hash)) // 12 lowercase hex digits: KafkaOffset checked
	return string(appendBlockName(b, prefix, offset))
}

// sha256Of is SHA-256(id), copying an id of up to 128 bytes to the stack rather than
// to the heap.
func sha256Of(id string) [sha256.Size]byte {
	var buf [128]byte
	return sha256.Sum256(append(buf[:0], id...))
}

// appendBlockName appends the name of the block holding offset of the partition that
// prefix ("<topic>/<partition>/") names: "<topic>/<partition>/<offset / ShardBlock>",
// as index.lua keys the block's slots.
func appendBlockName(b []byte, prefix string, offset uint64) []byte {
	b = append(b, prefix...)
	return strconv.AppendUint(b, offset/storeapi.ShardBlock, 10)
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

// idKeys are the keys of the by-id scripts (cancel, reschedule) of shard sh (the
// shard holding id: locate), the slot guard not included.
func (s *Store) idKeys(sh int) []string {
	k := s.keys[sh]
	return []string{k.due, k.msg, k.inflight, k.dead, k.counts, k.ix, k.dn}
}

// getCall looks id up in shard sh (get.lua).
func (s *Store) getCall(sh int, id string) call {
	k := s.keys[sh]
	return call{sc: s.get, keys: withGuard(k, []string{k.due, k.msg, k.inflight, k.dead, k.ix, k.nx}), args: []any{id, fingerprint(id)}}
}

// cancelCall cancels id in shard sh (cancel.lua, wrapped by ordered_cancel);
// remember, trimBefore and trimLimit as trimArgs.
func (s *Store) cancelCall(sh int, id string, now int64, remember int, trimBefore int64, trimLimit int, route, expected string, tomb int) call {
	args := []any{id, now, remember, trimBefore, trimLimit, route, expected, tomb, fingerprint(id), s.doneSliceMs()}
	k := s.keys[sh]
	keys := append(s.idKeys(sh), k.nx, k.ko, k.ki)
	return call{sc: s.oCancel, keys: withGuard(k, keys), args: args}
}

// rescheduleCall moves id of shard sh to due (reschedule.lua, wrapped by
// ordered_reschedule, kz being the key queue a requeued dead letter joins: queueOf);
// rest is the optional envelope and the score it was read at.
func (s *Store) rescheduleCall(sh int, id string, due int64, kz string, rest ...any) call {
	k := s.keys[sh]
	keys := append(s.idKeys(sh)[:6:6], k.ko, k.ki, kz)
	args := []any{id, due, fingerprint(id), "", ""} // ARGV[4], [5] optional: "" = not given
	copy(args[3:], rest)
	args = append(args, clock.NowMs(s.opt.Clock), s.coldHorizon())
	return call{sc: s.oReschedule, keys: withGuard(k, keys), args: args}
}

// parkKeys are the keys of park and bury on shard k.
func parkKeys(k shardKeys) []string {
	return withGuard(k, []string{k.due, k.msg, k.inflight, k.dead, k.counts, k.ix, k.dn, k.owner})
}

// coldHorizon is the park scripts' cold horizon argument (ms): -1 while the cold tier
// is off (Options.Cold.Horizon < 0).
func (s *Store) coldHorizon() int64 {
	if s.opt.Cold.Horizon < 0 {
		return -1
	}
	return s.opt.Cold.Horizon.Milliseconds()
}
