package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// pollTimeout bounds one lag poll (metadata, end offsets, committed offsets).
const pollTimeout = 5 * time.Second

// pollPeriod is how often the watchdog polls lag and evaluates the state: a fifth of the
// stall timeout, between 200ms and 5s.
func pollPeriod(stall time.Duration) time.Duration {
	return min(max(stall/5, 200*time.Millisecond), 5*time.Second)
}

// watch is the watchdog of one Run: every poll period it measures the lag, publishes the
// state and asks Run to rebuild the reader when it has been stuck for the stall timeout
// (tracker.check). It returns when ctx ends.
func (s *Source) watch(ctx context.Context) {
	transport, err := s.cfg.Conn.NewTransport()
	if err != nil { // New checked the same settings; keep watching without lag
		s.log.Warn("kafka ingress watchdog: no client for lag polls", "err", err)
	}
	var client *kafka.Client
	if transport != nil {
		client = &kafka.Client{Addr: kafka.TCP(s.cfg.Conn.Addrs()...), Timeout: pollTimeout, Transport: transport}
		defer transport.CloseIdleConnections()
	}
	period := pollPeriod(s.cfg.StallTimeout)
	timer := s.cfg.Clock.NewTimer(period)
	defer timer.Stop()
	progress := map[int]partitionProgress{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		if client != nil {
			offsets, err := s.pollOffsets(ctx, client)
			if ctx.Err() != nil {
				return
			}
			joined, mine := s.health.assigned()
			lag, other := int64(-1), stuckPartition{}
			if err == nil {
				lag, other = s.judge(offsets, progress, joined, mine)
			}
			s.health.polled(lag, other, err)
		}
		s.health.check()
		timer.Reset(period)
	}
}

// partitionOffsets are one partition's offsets at a poll.
type partitionOffsets struct {
	first, end, committed int64 // committed -1: none
}

func (o partitionOffsets) lag() int64 {
	from := o.committed
	if from > o.end {
		// Committed beyond the end: the topic was recreated or truncated under the group
		// (an old batch committed on the new topic). The group resumes there and never
		// reads the records the partition has: count them all, so it shows as stalled.
		from = o.first
	}
	if from < o.first {
		from = o.first // nothing committed (or expired): consumed from the start
	}
	return max(0, o.end-from)
}

// partitionProgress is when a partition's committed offset last moved (or it had no lag).
type partitionProgress struct {
	committed int64
	since     time.Time
}

// stuckPartition is the partition, not assigned to this reader, that has had lag and no
// committed progress the longest (since zero: none).
type stuckPartition struct {
	partition int
	lag       int64
	since     time.Time
}

// judge returns the lag of this reader (its assigned partitions; every partition while
// it is not joined: what the group as a whole is behind) and the longest-stuck partition
// owned by someone else. A partition assigned to a member that does not consume it (a
// group left in a bad state by churn) shows there: this instance cannot fetch it, but
// rebuilding its own reader forces the rebalance that reassigns it.
func (s *Source) judge(offsets map[int]partitionOffsets, progress map[int]partitionProgress, joined bool, mine []int) (int64, stuckPartition) {
	now := s.cfg.Clock.Now()
	var lag int64
	var worst stuckPartition
	for p, o := range offsets {
		pp, seen := progress[p]
		if !seen || pp.committed != o.committed || o.lag() == 0 {
			pp = partitionProgress{committed: o.committed, since: now}
			progress[p] = pp
		}
		if !joined || slices.Contains(mine, p) {
			lag += o.lag()
			continue
		}
		if o.lag() > 0 && (worst.since.IsZero() || pp.since.Before(worst.since)) {
			worst = stuckPartition{partition: p, lag: o.lag(), since: pp.since}
		}
	}
	return lag, worst
}

// pollOffsets reads the first, end and committed offsets of every partition of the
// topic.
func (s *Source) pollOffsets(ctx context.Context, client *kafka.Client) (map[int]partitionOffsets, error) {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{s.cfg.Topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name != s.cfg.Topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata of %s: %w", s.cfg.Topic, t.Error)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
	}
	out := map[int]partitionOffsets{}
	if len(parts) == 0 {
		return out, nil
	}
	// Committed offsets first, end offsets after: a commit never passes the end offset
	// read after it, so a committed offset above the end means the topic was recreated
	// or truncated, never a race between the two requests.
	committed, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: s.cfg.GroupID, Topics: map[string][]int{s.cfg.Topic: parts}})
	if err == nil && committed.Error != nil && !errors.Is(committed.Error, kafka.GroupIdNotFound) {
		err = committed.Error // a group that does not exist yet has committed nothing
	}
	if err != nil {
		return nil, fmt.Errorf("offset fetch: %w", err)
	}
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.cfg.Topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	done := map[int]int64{}
	for _, p := range committed.Topics[s.cfg.Topic] {
		if p.Error == nil {
			done[p.Partition] = p.CommittedOffset
		}
	}
	for _, p := range ends.Topics[s.cfg.Topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("list offsets of %s/%d: %w", s.cfg.Topic, p.Partition, p.Error)
		}
		c, ok := done[p.Partition]
		if !ok {
			c = -1
		}
		out[p.Partition] = partitionOffsets{first: p.FirstOffset, end: p.LastOffset, committed: c}
	}
	return out, nil
}
