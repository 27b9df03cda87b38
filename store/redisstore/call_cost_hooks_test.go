package redisstore

// The calls of BenchmarkStoreCallCost's "batch=0": a park and an ack of no message, with
// the keys and arguments Park and AckEnvelopes give them.

func (s *Store) parkNoneCall(shard int) (*script, []string, []any) {
	return s.park, parkKeys(s.keys[shard]), []any{t0, s.coldHorizon(), 0, "", 0, 0}
}

func (s *Store) ackCall(shard int, now int64) call {
	k := s.keys[shard]
	remember, trimBefore, trimLimit := s.trimArgs(now, 0)
	keys := withGuard(k, []string{k.msg, k.inflight, k.counts, k.ix, k.dn, k.nx, k.due, k.ko, k.ki, k.dead})
	return call{sc: s.oAck, keys: keys, args: []any{now, remember, trimBefore, trimLimit, 1, s.doneSliceMs(), 0, 0, 0}}
}
