package kafka

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/produce"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// record is one message to write; slot is its index in the caller's errs.
type record struct {
	topic   string
	key     []byte
	value   []byte
	headers []kafka.Header
	slot    int
	// placed, when set, receives the partition and offset the broker assigned
	// (Sink.Publish sets it to the envelope's Placed; copies to side targets do not).
	placed **envelope.Placement
}

// partBatch is the records of one partition in one publish, in batch order.
type partBatch struct {
	topic     string
	partition int32
	leader    int32
	recs      []int // indexes into the publish's records
	n         int   // len(recs) once route has counted them
	bytes     int64 // the records' recordSize, summed (cutRuns)
	tooLarge  bool  // the broker refused the whole set as too large: send one by one
}

// write sends recs once, in rounds: each partition's records are cut into runs of up
// to Options.RequestBytes (a larger record alone), and round r sends the r-th run of
// every partition, one produce request per partition leader (several when a leader's
// share exceeds Options.BatchSize records or Options.RequestBytes), all at once. A
// request is encoded whole before it is sent, so the bytes encoded at once are at most
// a round's, not the whole publish's. A partition whose run failed sends no more runs:
// its later records take that error, staying in order for the next try. Each record's
// result goes to errs[rec.slot]; slots are disjoint, so concurrent requests write errs
// safely.
func (s *Sink) write(ctx context.Context, recs []record, errs []error) {
	parts := s.route(ctx, recs, errs)
	runs := make([][]partBatch, len(parts))
	for i := range parts {
		runs[i] = cutRuns(recs, &parts[i], s.requestBytes)
	}
	for r := 0; ; r++ {
		var round []partBatch
		for i := range runs {
			if r >= len(runs[i]) {
				continue
			}
			if r > 0 {
				if err := runFailed(recs, errs, &runs[i][r-1]); err != nil {
					failRuns(recs, errs, runs[i][r:], err)
					runs[i] = runs[i][:r]
					continue
				}
			}
			round = append(round, runs[i][r])
		}
		if len(round) == 0 {
			return
		}
		s.writeRound(ctx, recs, round, errs)
	}
}

// writeRound sends one round's partition runs: one request per leader, split by plan.
func (s *Sink) writeRound(ctx context.Context, recs []record, batches []partBatch, errs []error) {
	reqs := plan(batches, s.batchSize, s.requestBytes)
	if len(reqs) == 1 {
		s.send(ctx, recs, batches, reqs[0], errs)
	} else {
		var wg sync.WaitGroup
		for _, r := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.send(ctx, recs, batches, r, errs)
			}()
		}
		wg.Wait()
	}
	for i := range batches {
		if batches[i].tooLarge {
			s.oneByOne(ctx, recs, &batches[i], errs)
		}
	}
}

// cutRuns cuts a partition's records into runs of up to max bytes (recordSize), in
// order; a record larger than max is a run alone.
func cutRuns(recs []record, b *partBatch, max int64) []partBatch {
	var runs []partBatch
	start, n := 0, int64(0)
	for j, k := range b.recs {
		size := recordSize(&recs[k])
		if j > start && n+size > max {
			runs = append(runs, partBatch{topic: b.topic, partition: b.partition, leader: b.leader, recs: b.recs[start:j:j], bytes: n})
			start, n = j, 0
		}
		n += size
	}
	if start < len(b.recs) {
		runs = append(runs, partBatch{topic: b.topic, partition: b.partition, leader: b.leader, recs: b.recs[start:], bytes: n})
	}
	return runs
}

// runFailed is the error a run's records were left with that is worth a retry (nil:
// every record appended, or refused for good), which its partition's later runs take.
func runFailed(recs []record, errs []error, b *partBatch) error {
	for _, k := range b.recs {
		if err := errs[recs[k].slot]; err != nil && !fault.IsPermanent(err) {
			return err
		}
	}
	return nil
}

// failRuns gives every record of runs err: a partition's runs after one that failed,
// left unsent so that the partition's records stay in order for the next try.
func failRuns(recs []record, errs []error, runs []partBatch, err error) {
	for _, b := range runs {
		for _, k := range b.recs {
			errs[recs[k].slot] = err
		}
	}
}

// route assigns each record its partition (kafka-go's Murmur2Balancer over the topic's
// partitions) and groups the records by partition. Records of a topic without usable
// metadata fail here, unsent.
func (s *Sink) route(ctx context.Context, recs []record, errs []error) []partBatch {
	var names []string
	topicOf := make([]int, len(recs))
	for i := range recs {
		j := slices.Index(names, recs[i].topic)
		if j < 0 {
			j = len(names)
			names = append(names, recs[i].topic)
		}
		topicOf[i] = j
	}
	metas, err := s.meta.lookup(ctx, names)
	if err != nil {
		for i := range recs {
			errs[recs[i].slot] = classify(recs[i].topic, err)
		}
		return nil
	}
	// Records are counted per partition first, so that every batch's index list is a
	// slice of one array: the publish path allocates per request, not per record.
	batchOf := make([][]int32, len(names)) // per topic: partition -> batch+1
	var batches []partBatch
	for i := range recs {
		j := topicOf[i]
		tm := metas[j]
		if tm.err != nil {
			errs[recs[i].slot] = classify(recs[i].topic, tm.err)
			topicOf[i] = -1
			continue
		}
		p := s.balancer.Balance(kafka.Message{Key: recs[i].key}, tm.partitions...)
		if batchOf[j] == nil {
			batchOf[j] = make([]int32, len(tm.partitions))
		}
		if batchOf[j][p] == 0 {
			batches = append(batches, partBatch{topic: recs[i].topic, partition: int32(p), leader: tm.leaders[p]})
			batchOf[j][p] = int32(len(batches))
		}
		b := int(batchOf[j][p] - 1)
		topicOf[i] = b
		batches[b].n++
	}
	all, off := make([]int, 0, len(recs)), 0
	for b := range batches {
		batches[b].recs = all[off : off : off+batches[b].n]
		off += batches[b].n
	}
	for i, b := range topicOf {
		if b >= 0 {
			batches[b].recs = append(batches[b].recs, i)
		}
	}
	return batches
}

// plan groups the partition batches into requests: one per leader, split into several
// when the leader's records exceed maxRecs records or maxBytes bytes (whole partition
// batches only, so a partition's records keep their order; one batch over a cap is a
// request alone). It returns indexes into batches, ordered by topic and partition
// within each request.
func plan(batches []partBatch, maxRecs int, maxBytes int64) [][]int {
	order := make([]int, len(batches))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := &batches[a], &batches[b]
		return cmp.Or(cmp.Compare(x.leader, y.leader), cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
	})
	var reqs [][]int
	start, n, size := 0, 0, int64(0)
	for i, b := range order {
		x := &batches[b]
		if i > start && (x.leader != batches[order[start]].leader || n+len(x.recs) > maxRecs || size+x.bytes > maxBytes) {
			reqs = append(reqs, order[start:i:i])
			start, n, size = i, 0, 0
		}
		n += len(x.recs)
		size += x.bytes
	}
	return append(reqs, order[start:])
}

// send writes the partition batches idx (one leader) in one produce request and
// records each record's result.
func (s *Sink) send(ctx context.Context, recs []record, batches []partBatch, idx []int, errs []error) {
	timeout := s.answerTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	req := &produce.Request{
		Acks: int16(kafka.RequireAll),
		// Half the wait, as kafka-go's own client asks: the broker answers "timed out"
		// while the request still waits, rather than the request giving up first.
		Timeout: int32(max(timeout/2, time.Millisecond) / time.Millisecond),
	}
	// idx is sorted by topic: each topic's partitions are a run of one array.
	parts := make([]produce.RequestPartition, len(idx))
	readers := make([]partRecords, len(idx))
	for n, i := range idx {
		b := &batches[i]
		if t := len(req.Topics); t == 0 || req.Topics[t-1].Topic != b.topic {
			req.Topics = append(req.Topics, produce.RequestTopic{Topic: b.topic, Partitions: parts[n:n]})
		}
		readers[n] = partRecords{recs: recs, idx: b.recs}
		// RecordSet.Version left 0: the request's Prepare picks the record format the
		// negotiated produce version needs (v2 from produce v3 on), as for the Writer.
		parts[n] = produce.RequestPartition{Partition: b.partition, RecordSet: protocol.RecordSet{Records: &readers[n]}}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = t.Partitions[:len(t.Partitions)+1]
	}
	rctx, cancel := context.WithTimeout(ctx, s.answerTimeout)
	r, err := s.tr.RoundTrip(rctx, s.addr, req)
	cancel()
	if err != nil {
		if rerr, ok := routingError(err); ok {
			err = rerr
		}
		for _, i := range idx {
			b := &batches[i]
			if staleMetadata(err) {
				s.meta.forget(b.topic)
			}
			for _, k := range b.recs {
				errs[recs[k].slot] = classify(b.topic, err)
			}
		}
		return
	}
	res := r.(*produce.Response)
	for _, i := range idx {
		b := &batches[i]
		base, err := answerFor(res, b.topic, b.partition)
		if err == nil {
			place(recs, b, base)
		}
		if kerr, ok := err.(kafka.Error); ok {
			if (kerr == kafka.MessageSizeTooLarge || kerr == kafka.RecordListTooLarge) && len(b.recs) > 1 {
				b.tooLarge = true // one of them may be the culprit: oneByOne finds it
				continue
			}
			if staleMetadata(kerr) {
				s.meta.forget(b.topic)
			}
		}
		if err != nil {
			for _, k := range b.recs {
				errs[recs[k].slot] = classify(b.topic, err)
			}
		}
	}
}

// place records where the broker appended b's records: the partition's base offset
// plus each record's index in the batch (the records were sent in b.recs order). The
// placements share one array: one allocation per batch, not one per message.
func place(recs []record, b *partBatch, base int64) {
	var all []envelope.Placement
	for j, k := range b.recs {
		if p := recs[k].placed; p != nil {
			if all == nil {
				all = make([]envelope.Placement, len(b.recs))
			}
			all[j] = envelope.Placement{Partition: b.partition, Offset: base + int64(j)}
			*p = &all[j]
		}
	}
}

// answerFor is the broker's result for one partition of a produce request (with the
// base offset it assigned on success): nil, a kafka.Error, or unknown outcome when the
// answer leaves the partition out.
func answerFor(res *produce.Response, topic string, partition int32) (int64, error) {
	for i := range res.Topics {
		if res.Topics[i].Topic != topic {
			continue
		}
		for _, p := range res.Topics[i].Partitions {
			if p.Partition == partition {
				if p.ErrorCode != 0 {
					return 0, kafka.Error(p.ErrorCode)
				}
				return p.BaseOffset, nil
			}
		}
	}
	return 0, fmt.Errorf("the broker's answer leaves out partition %d: %w", partition, fault.ErrUnknownOutcome)
}

// oneByOne writes again, one request per record and in order, the records of a
// partition whose set the broker refused as too large (nothing of it was appended),
// so only the oversized record fails. It stops at the first other failure and gives
// the records not yet sent the same error: they stay in order for the next try.
func (s *Sink) oneByOne(ctx context.Context, recs []record, b *partBatch, errs []error) {
	for n, k := range b.recs {
		one := []partBatch{{topic: b.topic, partition: b.partition, leader: b.leader, recs: []int{k}}}
		s.send(ctx, recs, one, []int{0}, errs)
		err := errs[recs[k].slot]
		if err == nil || fault.IsPermanent(err) {
			continue
		}
		for _, rest := range b.recs[n+1:] {
			errs[recs[rest].slot] = err
		}
		return
	}
}

// partRecords reads one partition's records for the request encoder, reusing one
// Record and two byte readers (as kafka-go's Writer does): the encoder copies each
// record before asking for the next. A zero Time lets the encoder stamp the time of
// sending, as the Writer did.
type partRecords struct {
	recs       []record
	idx        []int
	next       int
	rec        protocol.Record
	key, value bytesReadCloser
}

func (r *partRecords) ReadRecord() (*protocol.Record, error) {
	if r.next >= len(r.idx) {
		return nil, io.EOF
	}
	m := &r.recs[r.idx[r.next]]
	r.next++
	r.rec = protocol.Record{Headers: m.headers}
	if m.key != nil {
		r.key.Reset(m.key)
		r.rec.Key = &r.key
	}
	if m.value != nil {
		r.value.Reset(m.value)
		r.rec.Value = &r.value
	}
	return &r.rec, nil
}

type bytesReadCloser struct{ bytes.Reader }

func (*bytesReadCloser) Close() error { return nil }
