package app

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// TestJobOverHTTPWhileFiring runs a real bridge (redis-server, kfake) behind the admin
// HTTP API: 20,000 messages of route a are parked an hour out; a dry run counts them
// and changes nothing; a cancel job over them (POST /v1/jobs) runs in many batches
// while messages produced meanwhile with a short delay still fire and arrive; GET
// /v1/jobs/{id} reads done with every message cancelled, and route b is untouched.
func TestJobOverHTTPWhileFiring(t *testing.T) {
	tb, c, shardStore := startBridgeOverHTTP(t)
	ctx := context.Background()

	now := time.Now().UnixMilli()
	far := now + 3_600_000
	var envs []*envelope.Envelope
	for i := range 20_000 {
		envs = append(envs, &envelope.Envelope{ID: fmt.Sprintf("far-%05d", i), Route: "a", SourceBroker: envelope.BrokerHTTP,
			Source: "http", DueAt: far + int64(i%600)*1000, ReceivedAt: now, Payload: []byte("x")})
	}
	for i := range 50 {
		envs = append(envs, &envelope.Envelope{ID: fmt.Sprintf("b-%02d", i), Route: "b", SourceBroker: envelope.BrokerHTTP,
			Source: "http", DueAt: far, ReceivedAt: now, Payload: []byte("y")})
	}
	for start := 0; start < len(envs); start += 2000 {
		if _, _, err := shardStore.Park(ctx, envs[start:min(start+2000, len(envs))]); err != nil {
			t.Fatal(err)
		}
	}

	filter := admin.Filter{Route: "a", DueFrom: far}
	page, err := c.Browse(ctx, admin.Query{Filter: filter, Limit: 7})
	if err != nil || len(page.Messages) != 7 || page.Messages[0].ID != "far-00000" || page.NextCursor == "" {
		t.Fatalf("browse first page: %+v, %v", page, err)
	}
	pv, err := c.PreviewJob(ctx, admin.JobBody{Kind: admin.JobCancel, Filter: filter})
	if err != nil || pv.Matched != 20_000 || !pv.Exact || len(pv.Sample) != admin.DefaultJobSample {
		t.Fatalf("dry run: %+v, %v; want exactly 20000 matched and a sample", pv, err)
	}
	if st := tb.state(t, "far-00000"); st != admin.StatePending {
		t.Fatalf("after the dry run far-00000 is %q", st)
	}

	job, err := c.StartJob(ctx, admin.JobBody{Kind: admin.JobCancel, Filter: filter})
	if err != nil || job.ID == "" || job.State != admin.JobQueued {
		t.Fatalf("StartJob: %+v, %v", job, err)
	}
	// Messages due in a moment, produced while the job runs, must still fire.
	var soon []*kgo.Record
	for i := range 100 {
		soon = append(soon, rec("soon", "x-message-id", fmt.Sprintf("soon-%03d", i), "x-delay", "300"))
	}
	tb.produce(t, "a.delay", soon...)

	sawMidway := false
	deadline := time.Now().Add(120 * time.Second)
	for job.State != admin.JobDone {
		if job, err = c.GetJob(ctx, job.ID); err != nil {
			t.Fatalf("GetJob: %v", err)
		}
		if job.State == admin.JobRunning && job.Done > 0 && job.Done < 20_000 {
			sawMidway = true
		}
		if job.State == admin.JobFailed || time.Now().After(deadline) {
			t.Fatalf("job %+v", job)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if job.Matched != 20_000 || job.Done != 20_000 || job.Failed != 0 || job.Instance != tb.cfg.Instance {
		t.Fatalf("finished job %+v, want 20000 matched and cancelled by this instance", job)
	}
	if got := tb.obs.get("cancelled a"); got != 20_000 {
		t.Errorf("cancelled a = %d, want the job's 20000 counted", got)
	}
	if !sawMidway {
		t.Error("the job was never seen part-way: it did not run in batches")
	}
	list, err := c.ListJobs(ctx, 5)
	if err != nil || len(list) != 1 || list[0].ID != job.ID {
		t.Fatalf("ListJobs = %+v, %v", list, err)
	}
	if left, err := c.Browse(ctx, admin.Query{Filter: filter, Limit: 10}); err != nil || len(left.Messages) != 0 {
		t.Fatalf("route a after the cancel job: %+v, %v", left, err)
	}
	for _, id := range []string{"far-00000", "far-19999"} {
		if st := tb.state(t, id); st != admin.StateCancelled {
			t.Fatalf("%s is %q, want cancelled", id, st)
		}
	}
	if b, err := c.Browse(ctx, admin.Query{Filter: admin.Filter{Route: "b"}, Limit: 100}); err != nil || len(b.Messages) != 50 {
		t.Fatalf("route b: %d messages, %v; want its 50 untouched", len(b.Messages), err)
	}

	// Every message produced with a short delay arrived on the target.
	cl, err := kgo.NewClient(kgo.SeedBrokers(tb.kaddr), kgo.ConsumeTopics("a.out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]bool{}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for len(got) < 100 && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "x-message-id" {
					got[string(h.Value)] = true
				}
			}
		})
	}
	if len(got) != 100 {
		t.Fatalf("%d of the 100 messages due meanwhile arrived", len(got))
	}
}

// TestDeadLettersByRouteOverHTTP: dead letters of two routes; GET /v1/dead pages one
// route's with a cursor, a bad cursor is a 400 naming it, DELETE /v1/dead?route=a purges
// only route a's, and a requeue_dead job brings route b's back to pending.
func TestDeadLettersByRouteOverHTTP(t *testing.T) {
	tb, c, shardStore := startBridgeOverHTTP(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	var dead []*envelope.Envelope
	for i := range 1200 {
		dead = append(dead, &envelope.Envelope{ID: fmt.Sprintf("d-%04d", i), Route: []string{"a", "b"}[i%2],
			SourceBroker: envelope.BrokerHTTP, Source: "http", DueAt: now, ReceivedAt: now, Payload: []byte("x"),
			Attempt: 3, Reason: "publish failed"})
	}
	if _, err := shardStore.Bury(ctx, dead, now); err != nil {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	q := admin.Query{Filter: admin.Filter{Route: "b", State: admin.StateDead}, Limit: 250}
	for pages := 0; ; pages++ {
		page, err := c.ListDead(ctx, q)
		if err != nil || pages > 10 {
			t.Fatalf("ListDead page %d: %v", pages, err)
		}
		for _, m := range page.Messages {
			if m.Route != "b" || m.Reason != "publish failed" || m.DeadAt != now || seen[m.ID] {
				t.Fatalf("dead letter %+v: not route b's, or seen twice", m)
			}
			seen[m.ID] = true
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	if len(seen) != 600 {
		t.Fatalf("paged %d dead letters of route b, want 600", len(seen))
	}
	_, err := c.ListDead(ctx, admin.Query{Filter: admin.Filter{State: admin.StateDead}, Cursor: "bm9wZQ"})
	var apiErr *admin.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Field != "cursor" {
		t.Fatalf("bad cursor: %v, want a 400 naming cursor", err)
	}

	purged, err := c.PurgeDead(ctx, "a")
	if err != nil || purged.Purged != 600 {
		t.Fatalf("PurgeDead(a) = %+v, %v; want 600", purged, err)
	}
	job, err := c.StartJob(ctx, admin.JobBody{Kind: admin.JobRequeueDead, Filter: admin.Filter{Route: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); job.State != admin.JobDone; time.Sleep(10 * time.Millisecond) {
		if job, err = c.GetJob(ctx, job.ID); err != nil || job.State == admin.JobFailed || time.Now().After(deadline) {
			t.Fatalf("requeue job %+v, %v", job, err)
		}
	}
	if job.Matched != 600 || job.Done != 600 {
		t.Fatalf("requeue job %+v, want 600 requeued", job)
	}
	for _, e := range dead {
		st := tb.state(t, e.ID)
		ok := st == "" // purged
		if e.Route == "b" {
			// Requeued due now: it may have fired already.
			ok = st == admin.StatePending || st == admin.StateInflight || st == admin.StateDelivered
		}
		if !ok {
			t.Fatalf("%s of route %s is %q after the purge of a and the requeue of b", e.ID, e.Route, st)
		}
	}
}

// startBridgeOverHTTP starts a bridge (redis-server, kfake) behind the admin HTTP API and
// returns it, a client of the API and its shard store.
func startBridgeOverHTTP(t *testing.T) (*testBridge, *admin.Client, storeapi.Store) {
	t.Helper()
	tb := startBridge(t)
	ts := httptest.NewServer(admin.NewServer(admin.Options{Backend: tb.Backend}))
	t.Cleanup(ts.Close)
	shardStore := tb.shardStore(t)
	return tb, admin.NewClient(ts.URL, "", ts.Client()), shardStore
}
