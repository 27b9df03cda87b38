package storeapi

import (
	"strconv"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// The ordering key: x-delay-key wins, else the Kafka record key, else the AMQP routing
// key; only on an ordered route.
func TestOrderKey(t *testing.T) {
	kafka := &envelope.Envelope{ID: "a", Route: "r", Key: []byte("cust-1"), RoutingKey: ""}
	amqp := &envelope.Envelope{ID: "b", Route: "r", RoutingKey: "eu.invoice"}
	hdr := &envelope.Envelope{ID: "c", Route: "r", Key: []byte("cust-1"), RoutingKey: "eu.invoice"}
	hdr.SetHeader(HeaderOrderKey, []byte("acct-9"))
	none := &envelope.Envelope{ID: "d", Route: "r"}
	other := &envelope.Envelope{ID: "e", Route: "unordered", Key: []byte("cust-1")}
	o := NewOrdering([]string{"r"})
	for _, c := range []struct {
		e    *envelope.Envelope
		want string
	}{{kafka, "cust-1"}, {amqp, "eu.invoice"}, {hdr, "acct-9"}, {none, ""}, {other, ""}} {
		if got := o.Key(c.e); got != c.want {
			t.Errorf("Key(%s) = %q, want %q", c.e.ID, got, c.want)
		}
	}
	if o.ShardOf(kafka, 64) != ShardOfKey("r", "cust-1", 64) || o.ShardOf(none, 64) != ShardOf("d", 64) {
		t.Error("ShardOf does not follow the key")
	}
	if RealScore(GateBase+5) != 5 || RealScore(5) != 5 {
		t.Error("RealScore")
	}
}

// Keys spread evenly over shards: 64,000 keys of one route over 64 shards, every shard
// within ±15 % of the mean.
func TestShardOfKeySpreads(t *testing.T) {
	const shards, keys = 64, 64000
	n := make([]int, shards)
	for i := range keys {
		n[ShardOfKey("orders", "cust-"+strconv.Itoa(i), shards)]++
	}
	for sh, c := range n {
		if c < 850 || c > 1150 {
			t.Errorf("shard %d holds %d keys, want 1000 ± 15 %%", sh, c)
		}
	}
}
