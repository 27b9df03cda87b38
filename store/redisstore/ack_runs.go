package redisstore

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"

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
// offsets) keep the later's bytes, as kbdone's last write does.
func appendAckRuns(args []any, ids []string, now int64) ([]any, int) {
	type slot struct {
		block string
		off   uint64 // the slot's byte offset in its block
		at    int    // position in ids
		hash  string
	}
	var slots []slot
	for i, id := range ids {
		prefix, offset, hash, ok := storeapi.KafkaOffset(id)
		if !ok {
			continue
		}
		name := string(appendBlockName(nil, prefix, offset))
		slots = append(slots, slot{block: name, off: offset % storeapi.ShardBlock * kbSlot, at: i, hash: hash})
	}
	if len(slots) == 0 {
		return args, 0
	}
	slices.SortFunc(slots, func(a, b slot) int {
		return cmp.Or(cmp.Compare(a.block, b.block), cmp.Compare(a.off, b.off), cmp.Compare(a.at, b.at))
	})
	var sec [4]byte
	binary.BigEndian.PutUint32(sec[:], uint32(now/1000))
	start := len(args)
	for i := 0; i < len(slots); {
		block := slots[i].block
		nAt := len(args) + 1
		args = append(args, block, 0)
		runs := 0
		for i < len(slots) && slots[i].block == block {
			first := slots[i].off
			var b []byte
			for ; i < len(slots) && slots[i].block == block && slots[i].off <= first+uint64(len(b)); i++ {
				if slots[i].off < first+uint64(len(b)) { // the same slot again: the later wins
					b = b[:len(b)-kbSlot]
				}
				b, _ = hex.AppendDecode(b, []byte(slots[i].hash)) // 12 lowercase hex digits: KafkaOffset checked
				b = append(b, sec[:]...)
			}
			args = append(args, strconv.FormatUint(first, 10), string(b))
			runs++
		}
		args[nAt] = runs
	}
	return args, len(args) - start
}
