package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metaapi "github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/segmentio/kafka-go/protocol/produce"
)

// metadataTTL is how long the sink trusts a topic's partitions and leaders before it
// asks the transport again. The transport itself refreshes its cluster view every
// MetadataTTL (6s, randomised) and serves metadata requests from that view, so asking
// it is cheap but not free (it copies the topic's answer); a stale entry costs at most
// a "mismatching leaders" refusal before sending, which forces a refresh.
const metadataTTL = 6 * time.Second

// minForcedRefresh spaces forced refreshes: each one drops the transport's connection
// pool (its only public way to re-read the cluster at once) and the next requests dial
// again, so a burst of "not leader" answers costs one reconnect. A topic the metadata
// does not list forces nothing: the transport re-reads the whole cluster every
// MetadataTTL anyway, and a topic that stays missing (a misconfigured route) would
// otherwise make every healthy publish reconnect every few seconds.
const minForcedRefresh = 2 * time.Second

// topicMeta is what publish needs of one topic: the partition numbers for the balancer
// and each partition's leader.
type topicMeta struct {
	partitions []int   // 0..n-1, as kafka-go's Writer passes them to its Balancer
	leaders    []int32 // leader broker id by partition; -1 when there is none
	err        error   // the topic's metadata error code (unknown topic, not authorised)
	expires    time.Time
}

// metaCache holds topicMeta per topic. Entries are read without copying: they are
// replaced, never modified.
type metaCache struct {
	tr   *kafka.Transport
	addr net.Addr

	mu      sync.Mutex
	topics  map[string]*topicMeta
	refresh time.Time // last forced refresh of the transport
}

// lookup returns the metadata of each topic in names (same order). Entries older than
// metadataTTL and topics with an error (such as unknown) are asked of the transport
// again, all in one request. An error means no metadata could be had at all (no broker answered).
func (m *metaCache) lookup(ctx context.Context, names []string) ([]*topicMeta, error) {
	now := time.Now() // a cache age, not a behaviour tests drive: the real clock
	out := make([]*topicMeta, len(names))
	var missing []string
	m.mu.Lock()
	for i, name := range names {
		if tm := m.topics[name]; tm != nil && tm.err == nil && now.Before(tm.expires) {
			out[i] = tm
		} else {
			missing = append(missing, name)
		}
	}
	m.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	r, err := m.tr.RoundTrip(ctx, m.addr, &metaapi.Request{TopicNames: missing})
	if err != nil {
		return nil, err
	}
	res := r.(*metaapi.Response)
	fresh := make(map[string]*topicMeta, len(missing))
	for i := range res.Topics {
		t := &res.Topics[i]
		tm := &topicMeta{expires: now.Add(metadataTTL)}
		if t.ErrorCode != 0 {
			tm.err = kafka.Error(t.ErrorCode)
		} else {
			tm.partitions, tm.leaders = partitionsOf(t.Partitions)
			if len(tm.partitions) == 0 {
				tm.err = kafka.UnknownTopicOrPartition
			}
		}
		fresh[t.Name] = tm
	}
	m.mu.Lock()
	if m.topics == nil {
		m.topics = map[string]*topicMeta{}
	}
	for i, name := range names {
		if out[i] != nil {
			continue
		}
		tm := fresh[name]
		if tm == nil { // never happens with a well-behaved broker
			tm = &topicMeta{err: kafka.UnknownTopicOrPartition}
		}
		m.topics[name] = tm
		out[i] = tm
	}
	m.mu.Unlock()
	return out, nil
}

// partitionsOf lists a topic's partition numbers and leaders. Partitions are numbered
// 0..n-1; a gap (which a broker never reports) gets no leader.
func partitionsOf(ps []metaapi.ResponsePartition) ([]int, []int32) {
	n := 0
	for _, p := range ps {
		n = max(n, int(p.PartitionIndex)+1)
	}
	parts, leaders := make([]int, n), make([]int32, n)
	for i := range leaders {
		parts[i], leaders[i] = i, -1
	}
	for _, p := range ps {
		leaders[p.PartitionIndex] = p.LeaderID
	}
	return parts, leaders
}

// forget drops topic's entry and makes the transport re-read the cluster at once
// (at most every minForcedRefresh): called after a broker's answer or a routing
// refusal that means stale metadata.
func (m *metaCache) forget(topic string) {
	m.mu.Lock()
	delete(m.topics, topic)
	force := time.Since(m.refresh) >= minForcedRefresh
	if force {
		m.refresh = time.Now()
	}
	m.mu.Unlock()
	if force {
		// The transport serves metadata from a view it refreshes on its own timer; the
		// only public way to refresh it now is to drop its pools. Requests in flight
		// keep their pool until they end; the next request builds a pool whose first
		// act is to read the cluster metadata.
		m.tr.CloseIdleConnections()
	}
}

// staleMetadata reports whether err means the sink's or the transport's view of the
// cluster is out of date: a topic or partition it does not know, or a leader that moved.
func staleMetadata(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafka.UnknownTopicOrPartition, kafka.LeaderNotAvailable, kafka.NotLeaderForPartition,
			kafka.BrokerNotAvailable, kafka.ReplicaNotAvailable, kafka.KafkaStorageError,
			kafka.FencedLeaderEpoch, kafka.UnknownLeaderEpoch:
			return true
		}
	}
	return false
}

// routingError maps the transport's refusal to route a produce request (its cluster
// view lacks the topic, the partition or its leader, or the partitions of one request
// have different leaders there) to the Kafka error code a broker would have answered.
// Nothing was sent.
func routingError(err error) (error, bool) {
	var perr *produce.Error
	if !errors.As(err, &perr) {
		return err, false
	}
	code := kafka.NotLeaderForPartition // mismatching leaders
	switch {
	case errors.Is(err, protocol.ErrNoTopic), errors.Is(err, protocol.ErrNoPartition):
		code = kafka.UnknownTopicOrPartition
	case errors.Is(err, protocol.ErrNoLeader):
		code = kafka.LeaderNotAvailable
	}
	return fmt.Errorf("%w (not sent: %v)", code, perr.Err), true
}
