package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/redisstore"
)

// ScalePoint is one measurement at a number of pending messages.
type ScalePoint struct {
	Pending       int64   `json:"pending"`
	RedisUsed     int64   `json:"redis_used_memory"`
	BytesPerMsg   float64 `json:"redis_bytes_per_msg"` // used_memory delta / pending
	BeyondPayload float64 `json:"redis_bytes_beyond_payload"`
	BridgeRSS     int64   `json:"bridge_rss_bytes"`
}

// ScaleResult is scenario 4.
type ScaleResult struct {
	N              int          `json:"n"`
	PayloadBytes   int          `json:"payload_bytes"`
	EnvelopeBytes  int          `json:"envelope_bytes"` // encoded envelope incl. payload
	IDBytes        int          `json:"id_bytes"`
	ParkRate       float64      `json:"park_rate_per_s"` // Store.Park, 4 concurrent callers
	Points         []ScalePoint `json:"points"`
	RSSChange      float64      `json:"bridge_rss_change"`           // RSS at N / RSS at 0 - 1
	RSSUnderLoad   int64        `json:"bridge_rss_short_flow_bytes"` // after the short-delay flow
	HashBytesPer   float64      `json:"msg_hash_bytes_per_entry"`
	ZsetBytesPer   float64      `json:"due_zset_bytes_per_entry"`
	ColdBytesPer   float64      `json:"cold_bucket_bytes_per_element"` // MEMORY USAGE of shard 0's cold buckets / elements
	ColdShare      float64      `json:"cold_share"`                    // shard 0's messages in its cold tier / pending there
	Short          ProbeResult  `json:"short_delay_while_pending"`
	ShortSameRate  *ProbeResult `json:"short_delay_reference,omitempty"` // steady step at the same rate, if it ran
	ShortP99Factor float64      `json:"short_p99_vs_reference"`
	ShortRedis     RedisCost    `json:"short_redis"`
}

// scaleEnvelope is what ingress/kafka parks for a 100-byte record with x-delay, under
// the id topic/partition/offset without the record hash that ends a default id: the
// form the bytes-per-pending figures have been taken with since before the hash, kept
// so that they stay comparable (a default id's 13 more bytes cost 13 B per pending
// message: docs/SCALE.md).
func scaleEnvelope(i int, due, now int64) *envelope.Envelope {
	return kafkaRecord("scale", "scale.delay", i, due, now)
}

// kafkaEnvelope is what ingress/kafka parks for record i (6 partitions) of topic on
// route, a 100-byte payload with x-delay, under the record's default id
// (topic/partition/offset/hash: ingress.KafkaRecordID), which the store places and
// remembers by its partition's block of offsets.
func kafkaEnvelope(route, topic string, i int, due, now int64) *envelope.Envelope {
	e := kafkaRecord(route, topic, i, due, now)
	part, off := i%6, i/6
	e.ID = ingress.KafkaRecordID(topic, part, int64(off), time.UnixMilli(now), e.Key, e.Payload, e.Headers)
	return e
}

// kafkaRecord is record i of topic as kafkaEnvelope parks it, under the id
// topic/partition/offset.
func kafkaRecord(route, topic string, i int, due, now int64) *envelope.Envelope {
	part, off := i%6, i/6
	return &envelope.Envelope{
		ID: topic + "/" + strconv.Itoa(part) + "/" + strconv.Itoa(off), Route: route,
		SourceBroker: envelope.BrokerKafka, Source: topic, DueAt: due, ReceivedAt: now,
		Key: []byte("k" + strconv.Itoa(i)), Payload: payload,
		Headers: []envelope.Header{{Key: "x-delay", Value: strconv.FormatInt(due-now, 10)}},
	}
}

func runScale(e *env) error {
	n := pick(e, 10000000, 200000)
	if e.scaleN > 0 {
		n = e.scaleN
	}
	checkpoints := []int{n / 10, n / 5, n / 2, n}
	r := &ScaleResult{N: n, PayloadBytes: payloadSize}
	e.res.Scale = r
	sample := scaleEnvelope(n-1, time.Now().Add(time.Hour).UnixMilli(), time.Now().UnixMilli())
	enc, err := envelope.Encode(sample)
	if err != nil {
		return err
	}
	r.EnvelopeBytes, r.IDBytes = len(enc), len(sample.ID)

	// One route: the short-delay flow comes through Kafka; the N pending messages are
	// parked straight into the route's shards.
	src, dst := "scale-short.delay", "scale-short"
	if err := createTopics(e.ctx, e.kafka.addr, e.partitions, src, dst); err != nil {
		return err
	}
	b, err := startBridge(e, "scale", []route{{name: "scale", from: src, to: dst}}, "")
	if err != nil {
		return err
	}
	defer b.close()
	{ // warm the whole path once so RSS at 0 includes the connections
		c := collect(e.kafka.addr, dst, e.partitions, false)
		err := warmUp(e.ctx, e.kafka.addr, src, c)
		c.stop()
		if err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second)
	mem0 := e.redis.usedMemory(e.ctx)
	r.Points = append(r.Points, ScalePoint{RedisUsed: mem0, BridgeRSS: rssBytes(b.pid())})
	// With -profile, the bridge's heap profile and runtime.MemStats at every point, to
	// tell what its RSS growth is made of.
	heapAt := func(pending int) {
		if b.pprof == "" {
			return
		}
		path := filepath.Join(e.outDir, fmt.Sprintf("%s-scale-heap-%d.txt", e.stamp, pending))
		if err := fetchURL(fmt.Sprintf("http://%s/debug/pprof/heap?debug=1", b.pprof), path); err != nil {
			logf("scale: heap profile: %v", err)
		}
	}
	heapAt(0)

	store, err := redisstore.New(e.ctx, e.redis.rdb, redisstore.Options{Cluster: "scale", DoneWindow: time.Hour})
	if err != nil {
		return err
	}
	parked := 0
	parkTime := time.Duration(0)
	for _, cp := range checkpoints {
		t := time.Now()
		if err := parkRange(e.ctx, store, parked, cp, func(i int, now int64) *envelope.Envelope {
			return scaleEnvelope(i, now+time.Hour.Milliseconds()+int64(i%600000), now)
		}); err != nil {
			return err
		}
		parkTime += time.Since(t)
		parked = cp
		time.Sleep(2 * time.Second) // a few safety scans of the idle pumps
		st, err := b.stats()
		if err != nil {
			return err
		}
		used := e.redis.usedMemory(e.ctx)
		p := ScalePoint{Pending: st.Pending, RedisUsed: used, BridgeRSS: rssBytes(b.pid())}
		p.BytesPerMsg = float64(used-mem0) / float64(st.Pending)
		p.BeyondPayload = p.BytesPerMsg - payloadSize
		r.Points = append(r.Points, p)
		heapAt(int(st.Pending))
		logf("scale: %d pending (parked %d at %.0f/s): redis %.0f MiB, %.0f B/msg (%.0f beyond the payload), bridge RSS %.1f MiB",
			st.Pending, cp, float64(parked)/parkTime.Seconds(), float64(used)/(1<<20), p.BytesPerMsg, p.BeyondPayload, float64(p.BridgeRSS)/(1<<20))
	}
	r.ParkRate = float64(n) / parkTime.Seconds()
	r.RSSChange = Ratio(float64(r.Points[len(r.Points)-1].BridgeRSS), float64(r.Points[0].BridgeRSS)) - 1
	hashKey, zsetKey := "delaybridge:{scale:0}:msg", "delaybridge:{scale:0}:due"
	hn, _ := e.redis.rdb.HLen(e.ctx, hashKey).Result()
	zn, _ := e.redis.rdb.ZCard(e.ctx, zsetKey).Result()
	hb, _ := e.redis.rdb.MemoryUsage(e.ctx, hashKey, 0).Result()
	zb, _ := e.redis.rdb.MemoryUsage(e.ctx, zsetKey, 0).Result()
	if hn > 0 && zn > 0 {
		r.HashBytesPer, r.ZsetBytesPer = float64(hb)/float64(hn), float64(zb)/float64(zn)
	}
	r.ColdBytesPer, r.ColdShare = coldUsage(e, zn)

	// Short delays while N are pending.
	rate := pick(e, 10000.0, 1000.0)
	maxD := pick(e, 10*time.Second, 3*time.Second)
	dur := pick(e, 20*time.Second, 5*time.Second)
	cs0 := e.redis.commandStats(e.ctx)
	p, err := probe(e, fmt.Sprintf("bridge %d, %s pending", int(rate), count(n)), src, dst, rate, dur, maxD,
		30*time.Second, false, delayed("s", time.Second, maxD), map[string]int{"bridge": b.pid()}, true)
	if err != nil {
		return err
	}
	r.Short = p
	r.ShortRedis = redisCost(cs0, e.redis.commandStats(e.ctx), p.Arrived)
	if p.Arrived > 0 {
		r.ShortRedis.CPUUsecPerMsg = p.CPU.CPUSeconds["redis"] * 1e6 / float64(p.Arrived)
	}
	r.RSSUnderLoad = rssBytes(b.pid())
	if e.res.Steady != nil {
		for i := range e.res.Steady.Steps {
			if st := &e.res.Steady.Steps[i]; st.Offered == rate {
				r.ShortSameRate = &st.ProbeResult
				r.ShortP99Factor = Ratio(p.Lat.P99, st.Lat.P99)
			}
		}
	}
	// Emptying 10M entries takes Redis a while; do it now rather than in the next
	// scenario's timing.
	t := time.Now()
	if err := e.fresh(); err != nil {
		return err
	}
	logf("scale: flushing %d entries took %s", n, time.Since(t).Round(time.Millisecond))
	return nil
}

// parkRange parks messages [from, to) built by mk, 1000 per Park call, from 4
// goroutines: the product's own park script and envelope encoding, without Kafka.
func parkRange(ctx context.Context, store *redisstore.Store, from, to int, mk func(i int, now int64) *envelope.Envelope) error {
	const batch = 1000
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			envs := make([]*envelope.Envelope, 0, batch)
			for ctx.Err() == nil && firstErr.Load() == nil {
				lo := int(next.Add(batch)) - batch
				if lo >= to {
					return
				}
				hi := min(lo+batch, to)
				now := time.Now().UnixMilli()
				envs = envs[:0]
				for i := lo; i < hi; i++ {
					envs = append(envs, mk(i, now))
				}
				if _, _, err := store.Park(ctx, envs); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return fmt.Errorf("park: %w", *e)
	}
	return ctx.Err()
}

// count renders 10000000 as "10M" and 200000 as "200k".
func count(n int) string {
	switch {
	case n >= 1000000 && n%100000 == 0:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 1000 && n%100 == 0:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.Itoa(n)
}

// coldUsage is MEMORY USAGE per element of shard 0's cold-tier buckets (the store's
// cold tier, docs/ARCHITECTURE.md) and the share of that shard's pending messages in
// them (due holds the rest).
func coldUsage(e *env, due int64) (perElement, share float64) {
	buckets, _ := e.redis.rdb.ZRange(e.ctx, "delaybridge:{scale:0}:cb", 0, -1).Result()
	var bytes, n int64
	for _, b := range buckets {
		key := "delaybridge:{scale:0}:cb:" + b
		u, _ := e.redis.rdb.MemoryUsage(e.ctx, key, 0).Result()
		l, _ := e.redis.rdb.LLen(e.ctx, key).Result()
		bytes, n = bytes+u, n+l
	}
	if n == 0 {
		return 0, 0
	}
	return float64(bytes) / float64(n), float64(n) / float64(n+due)
}
