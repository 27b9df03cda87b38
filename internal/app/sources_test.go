package app

import (
	"context"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/testkit"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/scheduler/store"
)

// TestKafkaMembersRecordTheLayout: a member heartbeated only by its Kafka source (its
// scheduler has not had a round yet) records this build's store layout, so the others
// do not take it for an instance of the release before layout 3 and the store keeps
// writing layout 3 (compat mode stays off).
func TestKafkaMembersRecordTheLayout(t *testing.T) {
	rdb := testkit.StartRedis(t).Client()
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix, cluster := testkit.Uniq(t, "km"), "c"
	st, err := store.New(ctx, rdb, store.Options{Prefix: prefix, Cluster: cluster, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := kafkaMembers{Redis: membership.New(rdb, prefix, cluster), store: st}
	now := time.Now().UnixMilli()
	if err := m.Heartbeat(ctx, "kafka-only", now); err != nil {
		t.Fatal(err)
	}
	live, err := m.Live(ctx, now, time.Second)
	if err != nil || len(live) != 1 || live[0].Name != "kafka-only" {
		t.Fatalf("members after the Kafka source's heartbeat = %v %v, want kafka-only", live, err)
	}
	if _, err := st.LiveMembers(ctx, now, time.Second); err != nil {
		t.Fatal(err)
	}
	if l := st.WritingLayout(); l != 3 {
		t.Fatalf("store writes layout %d beside a member heartbeated by its Kafka source, want 3", l)
	}
}
