package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// pollTimeout bounds one broker call of an ownership round or a worker (metadata,
// offsets, offset fetch and commit).
const pollTimeout = 5 * time.Second

// partitionOffsets are one partition's first and end offsets at a poll.
type partitionOffsets struct {
	first, end int64
}

// errNoTopic: the delay topic does not exist (deleted, or not created yet).
var errNoTopic = errors.New("the topic does not exist")

// pollTopic reads the topic's partitions (so partitions added later are picked up)
// and their first and end offsets. A topic that does not exist is errNoTopic.
func (s *Source) pollTopic(ctx context.Context, client *kafka.Client) (map[int]partitionOffsets, error) {
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
			if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
				return nil, fmt.Errorf("%s: %w", s.cfg.Topic, errNoTopic)
			}
			return nil, fmt.Errorf("metadata of %s: %w", s.cfg.Topic, t.Error)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
	}
	out := map[int]partitionOffsets{}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%s: %w", s.cfg.Topic, errNoTopic)
	}
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.cfg.Topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	for _, p := range ends.Topics[s.cfg.Topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("list offsets of %s/%d: %w", s.cfg.Topic, p.Partition, p.Error)
		}
		out[p.Partition] = partitionOffsets{first: p.FirstOffset, end: p.LastOffset}
	}
	return out, nil
}

// committedOffset is the group's committed offset of partition, -1 when there is none.
func (s *Source) committedOffset(ctx context.Context, client *kafka.Client, partition int) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	res, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: s.cfg.GroupID, Topics: map[string][]int{s.cfg.Topic: {partition}}})
	if err == nil && res.Error != nil && !errors.Is(res.Error, kafka.GroupIdNotFound) {
		err = res.Error // a group that does not exist yet has committed nothing
	}
	if err != nil {
		return 0, fmt.Errorf("offset fetch of %s/%d: %w", s.cfg.Topic, partition, err)
	}
	for _, p := range res.Topics[s.cfg.Topic] {
		if p.Partition != partition {
			continue
		}
		if p.Error != nil {
			return 0, fmt.Errorf("offset fetch of %s/%d: %w", s.cfg.Topic, partition, p.Error)
		}
		return p.CommittedOffset, nil
	}
	return -1, nil
}

// commitOffset commits offset (the next record to read) of partition to the group, as
// a client outside the group does (generation -1, no member id).
func (s *Source) commitOffset(ctx context.Context, client *kafka.Client, partition int, offset int64) error {
	res, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: s.cfg.GroupID, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{s.cfg.Topic: {{Partition: partition, Offset: offset}}}})
	if err != nil {
		return err
	}
	for _, p := range res.Topics[s.cfg.Topic] {
		if p.Error != nil {
			return p.Error
		}
	}
	return nil
}
