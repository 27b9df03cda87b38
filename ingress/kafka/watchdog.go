package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
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
	transport, err := kafkaconn.Transport(s.cfg)
	if err != nil { // New checked the same settings; keep watching without lag
		s.log.Warn("kafka ingress watchdog: no client for lag polls", "err", err)
	}
	var client *kafka.Client
	if transport != nil {
		client = &kafka.Client{Addr: kafka.TCP(s.cfg.Brokers...), Timeout: pollTimeout, Transport: transport}
		defer transport.CloseIdleConnections()
	}
	period := pollPeriod(s.opts.StallTimeout)
	timer := s.opts.Clock.NewTimer(period)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		if client != nil {
			lag, err := s.pollLag(ctx, client)
			if ctx.Err() != nil {
				return
			}
			s.health.polled(lag, err)
		}
		s.health.check()
		timer.Reset(period)
	}
}

// pollLag returns how many records the source is behind: end offset minus committed
// offset (or the first offset, where the group committed none), summed over the
// partitions assigned to this reader, or over every partition of the topic while it is
// not joined (what the group as a whole is behind).
func (s *Source) pollLag(ctx context.Context, client *kafka.Client) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	joined, parts := s.health.assigned()
	if !joined {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{s.topic}})
		if err != nil {
			return -1, fmt.Errorf("metadata: %w", err)
		}
		for _, t := range md.Topics {
			if t.Name != s.topic {
				continue
			}
			if t.Error != nil {
				return -1, fmt.Errorf("metadata of %s: %w", s.topic, t.Error)
			}
			for _, p := range t.Partitions {
				parts = append(parts, p.ID)
			}
		}
	}
	if len(parts) == 0 {
		return 0, nil
	}
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.topic: reqs}})
	if err != nil {
		return -1, fmt.Errorf("list offsets: %w", err)
	}
	committed, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: s.cfg.GroupID, Topics: map[string][]int{s.topic: parts}})
	if err == nil && committed.Error != nil && !errors.Is(committed.Error, kafka.GroupIdNotFound) {
		err = committed.Error // a group that does not exist yet has committed nothing
	}
	if err != nil {
		return -1, fmt.Errorf("offset fetch: %w", err)
	}
	done := map[int]int64{}
	for _, p := range committed.Topics[s.topic] {
		if p.Error == nil {
			done[p.Partition] = p.CommittedOffset
		}
	}
	var lag int64
	for _, p := range ends.Topics[s.topic] {
		if p.Error != nil {
			return -1, fmt.Errorf("list offsets of %s/%d: %w", s.topic, p.Partition, p.Error)
		}
		from, ok := done[p.Partition]
		if !ok || from < p.FirstOffset {
			from = p.FirstOffset // nothing committed (or expired): consumed from the start
		}
		lag += max(0, p.LastOffset-from)
	}
	return lag, nil
}
