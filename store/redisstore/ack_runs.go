package redisstore

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strconv"
	"unsafe"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// appendAckRuns appends ack.lua's done runs for the Kafka default ids among ids,
// delivered at now (unix ms), and returns args and how many entries it appended. Per
// block: its name, its run count, then each run of consecutive slots as the byte
// offset of its first slot (decimal text) and the slots' bytes, each the id's record
// hash (6 bytes) and the second delivered (4 bytes big endian), as index.lua's kbdone
// would write them. So ack.lua writes a block's slots with one SETRANGE per run and
// reads no id: at a steady rate an ack's ids lie far apart in their blocks (messages
// due together were parked apart), and taking each fingerprint apart in Lua, sorting
// the slots and joining them cost about as much as the SETRANGEs themselves
// (`cd bench && go run ./instr -spread 32`). Two ids at one slot (a recreated topic's
// offsets) keep the later's bytes, as kbdone's last write does. Blocks come in the
// order their partitions first appear in ids; the names, offsets and slot bytes share
// one buffer, each argument a *string view of it (runArgs). covered[i] says that ids[i] needs no
// fingerprint: its slot is in the runs and its offset below 2^53, so ack.lua can build
// the fingerprint from the id in the rare call that does not write the runs (kbackfp).
func appendAckRuns(args []any, ids []string, now int64) (_ []any, n int, covered []bool) {
	var (
		prefixes []string // the call's partitions ("<topic>/<partition>/"), in order met
		slots    = make([]ackSlot, 0, len(ids))
		hashes   = make([]string, len(ids)) // the record hash of ids[i]
		size     int
	)
	for i, id := range ids {
		prefix, offset, hash, ok := storeapi.KafkaOffset(id)
		if !ok {
			continue
		}
		p := slices.Index(prefixes, prefix)
		if p < 0 {
			p = len(prefixes)
			prefixes = append(prefixes, prefix)
		}
		if p >= 1<<keyPartBits || offset >= 1<<(64-keyPartBits) {
			return args, 0, nil // beyond the key (never for real offsets): ack.lua takes the ids apart
		}
		slots = append(slots, ackSlot{key: uint64(p)<<(64-keyPartBits) | offset, at: i})
		hashes[i] = hash
		size += kbSlot + 8 + len(prefix) + 20
	}
	if len(slots) == 0 {
		return args, 0, nil
	}
	slices.SortFunc(slots, func(a, b ackSlot) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.at, b.at)) })
	start := len(args)
	args = runArgs(args, slots, prefixes, hashes, now, size)
	covered = make([]bool, len(ids))
	for _, sl := range slots {
		covered[sl.at] = sl.key&(1<<(64-keyPartBits)-1) < 1<<53
	}
	return args, len(args) - start, covered
}

// ackSlot is a Kafka default id's sort key in appendAckRuns: its partition's rank among
// the call's partitions and its offset, packed into one integer (ties keep ids' order:
// at, its place in the call).
type ackSlot struct {
	key uint64
	at  int
}

// runArgs appends the runs of slots (sorted by key) to args: per block its name and run
// count, per run its first slot's byte offset and its slots' bytes (appendAckRuns). buf
// is sized from size so that it rarely grows.
func runArgs(args []any, slots []ackSlot, prefixes, hashes []string, now int64, size int) []any {
	var sec [4]byte
	binary.BigEndian.PutUint32(sec[:], uint32(now/1000))
	buf := make([]byte, 0, size)
	start := len(args)
	// The string arguments are views of buf, taken once each is written (nothing
	// rewrites a byte a view holds: a run is cut back only before its own view), and
	// go to args as *string at the end, in the nil places put leaves: go-redis writes
	// a *string as its value, and an interface holding a pointer needs no allocation
	// of its own, where each []byte boxed into one did (two per run, ~2 per message at
	// a steady rate).
	strs := make([]string, 0, 3*len(slots)) // a block's name, then two per run
	put := func(from int) {
		strs = append(strs, unsafe.String(unsafe.SliceData(buf[from:]), len(buf)-from))
		args = append(args, nil)
	}
	for i := 0; i < len(slots); {
		blockKey := slots[i].key / storeapi.ShardBlock
		same := func(j int) bool { return j < len(slots) && slots[j].key/storeapi.ShardBlock == blockKey }
		slotOff := func(j int) uint64 { return slots[j].key % storeapi.ShardBlock * kbSlot }
		from := len(buf)
		buf = appendBlockName(buf, prefixes[slots[i].key>>(64-keyPartBits)], slots[i].key&(1<<(64-keyPartBits)-1))
		put(from)
		nAt := len(args)
		args = append(args, 0)
		runs := 0
		for same(i) {
			first := slotOff(i)
			from := len(buf)
			buf = strconv.AppendUint(buf, first, 10)
			put(from)
			from = len(buf)
			for ; same(i) && slotOff(i) <= first+uint64(len(buf)-from); i++ {
				if slotOff(i) < first+uint64(len(buf)-from) { // the same slot again: the later wins
					buf = buf[:len(buf)-kbSlot]
				}
				buf = appendHexHash(buf, hashes[slots[i].at])
				buf = append(buf, sec[:]...)
			}
			put(from)
			runs++
		}
		args[nAt] = runs
	}
	for i, j := start, 0; i < len(args); i++ {
		if args[i] == nil {
			args[i] = &strs[j]
			j++
		}
	}
	return args
}

// keyPartBits is the bits of appendAckRuns' sort key that rank a partition; the rest
// hold the offset.
const keyPartBits = 10

// appendHexHash appends the 6 bytes that a Kafka default id's 12 lowercase hex digits
// (storeapi.KafkaOffset checked them) spell.
func appendHexHash(b []byte, hex string) []byte {
	for i := 0; i+1 < len(hex); i += 2 {
		b = append(b, unhex(hex[i])<<4|unhex(hex[i+1]))
	}
	return b
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}
