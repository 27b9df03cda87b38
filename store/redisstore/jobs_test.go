package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

func TestJobRecordLifecycle(t *testing.T) {
	browseBackends(t, 4, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := browseT0
		a, err := s.CreateJob(ctx, JobSpec{Kind: JobCancel, Filter: JobFilter{Route: "a"}}, now)
		if err != nil {
			t.Fatalf("CreateJob: %v", err)
		}
		b, err := s.CreateJob(ctx, JobSpec{Kind: JobPurgeDead, DryRun: true}, now+1)
		if err != nil {
			t.Fatalf("CreateJob: %v", err)
		}
		got, err := s.GetJob(ctx, a.ID, now)
		if err != nil || got.State != JobQueued || got.Spec.Filter.Route != "a" || got.Spec.Filter.State != StatePending || got.Created != now {
			t.Fatalf("GetJob = %+v, %v; want queued cancel of route a, state defaulted to pending", got, err)
		}
		list, err := s.ListJobs(ctx, 10, now)
		if err != nil || len(list) != 2 || list[0].ID != b.ID || list[1].ID != a.ID {
			t.Fatalf("ListJobs = %v, %v; want newest first", list, err)
		}
		active, _ := s.ActiveJobs(ctx)
		if slices.Sort(active); len(active) != 2 {
			t.Fatalf("active = %v", active)
		}

		// One runner claims it; another cannot while the heartbeat is fresh.
		if _, ok, err := s.ClaimJob(ctx, a.ID, "i1", now); !ok || err != nil {
			t.Fatalf("ClaimJob i1 = %v, %v", ok, err)
		}
		if _, ok, err := s.ClaimJob(ctx, a.ID, "i2", now+JobHeartbeat.Milliseconds()); ok || err != nil {
			t.Fatalf("ClaimJob i2 while i1 heartbeats = %v, %v; want refused", ok, err)
		}
		p := JobProgress{Matched: 10, Done: 7, Skipped: 2, Failed: 1, Cursor: "c1", LastError: "boom"}
		if err := s.SaveJob(ctx, a.ID, "i1", p, "", now+1000); err != nil {
			t.Fatalf("SaveJob: %v", err)
		}
		got, _ = s.GetJob(ctx, a.ID, now+1000)
		if got.State != JobRunning || got.Instance != "i1" || got.Progress.Done != 7 || got.Progress.Cursor != "c1" ||
			got.Progress.LastError != "boom" || got.Heartbeat != now+1000 {
			t.Fatalf("after SaveJob: %+v", got)
		}

		// Its instance stops heartbeating: the job reads abandoned, and another takes it over.
		late := now + 1000 + JobStaleAfter.Milliseconds() + 1
		if got, _ = s.GetJob(ctx, a.ID, late); got.State != JobAbandoned {
			t.Fatalf("stale job reads %q, want abandoned", got.State)
		}
		j, ok, err := s.ClaimJob(ctx, a.ID, "i2", late)
		if !ok || err != nil || j.State != JobRunning || j.Instance != "i2" || j.Claims != 2 || j.Progress.Cursor != "c1" {
			t.Fatalf("take-over = %+v, %v, %v; want running on i2 from cursor c1", j, ok, err)
		}
		if err := s.SaveJob(ctx, a.ID, "i1", p, "", late); !errors.Is(err, ErrJobLost) {
			t.Fatalf("SaveJob by the old runner = %v, want ErrJobLost", err)
		}
		p.Done = 9
		if err := s.SaveJob(ctx, a.ID, "i2", p, JobDone, late+1); err != nil {
			t.Fatalf("finish: %v", err)
		}
		got, _ = s.GetJob(ctx, a.ID, late+JobStaleAfter.Milliseconds()*10)
		if got.State != JobDone || got.Progress.Done != 9 {
			t.Fatalf("finished job = %+v", got)
		}
		ttl := s.rdb.PTTL(ctx, s.jobKey(a.ID)).Val()
		if ttl <= 0 || ttl > JobRetention {
			t.Fatalf("finished job TTL %v, want within the retention %v", ttl, JobRetention)
		}
		if prior, err := s.CancelJob(ctx, a.ID, late); prior != JobDone || err != nil {
			t.Fatalf("CancelJob(done) = %q, %v", prior, err)
		}
		// A queued job cancelled never runs.
		if prior, err := s.CancelJob(ctx, b.ID, late); prior != JobQueued || err != nil {
			t.Fatalf("CancelJob(queued) = %q, %v", prior, err)
		}
		if _, ok, _ := s.ClaimJob(ctx, b.ID, "i1", late); ok {
			t.Fatal("a cancelled job was claimed")
		}
		if active, _ = s.ActiveJobs(ctx); len(active) != 0 {
			t.Fatalf("active after the end of both = %v", active)
		}
		if _, err := s.GetJob(ctx, "nope", now); !errors.Is(err, ErrJobNotFound) {
			t.Fatalf("GetJob(unknown) = %v", err)
		}
		// A cancelled running job: its runner's next save fails.
		c, _ := s.CreateJob(ctx, JobSpec{Kind: JobRequeueDead}, now)
		_, _, _ = s.ClaimJob(ctx, c.ID, "i1", now)
		_, _ = s.CancelJob(ctx, c.ID, now)
		if err := s.SaveJob(ctx, c.ID, "i1", p, "", now); !errors.Is(err, ErrJobLost) {
			t.Fatalf("SaveJob after cancel = %v, want ErrJobLost", err)
		}
	})
}

func TestJobSpecValidate(t *testing.T) {
	bad := []JobSpec{
		{Kind: "explode"},
		{Kind: JobCancel, Filter: JobFilter{State: StateDelivered}},
		{Kind: JobReschedule},
		{Kind: JobReschedule, DueAt: 5, ShiftMs: 5},
		{Kind: JobReschedule, DueAt: 5, Filter: JobFilter{State: StateInflight}},
		{Kind: JobPurgeDead, Filter: JobFilter{State: StatePending}},
		{Kind: JobPurgeDead, ShiftMs: 3},
		{Kind: JobCancel, Filter: JobFilter{From: 10, To: 5}},
	}
	for _, sp := range bad {
		if err := sp.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", sp, err)
		}
	}
	good := JobSpec{Kind: JobReschedule, ShiftMs: -5, Sample: 1000}
	if err := good.Validate(); err != nil || good.Sample != JobSampleMax || good.Filter.State != StatePending {
		t.Fatalf("Validate = %v, %+v", err, good)
	}
}

// TestJobBatchOps applies each batch operation to parked messages and checks what
// changed and what was left alone.
func TestJobBatchOps(t *testing.T) {
	browseBackends(t, 8, func(t *testing.T, s *Store) {
		ctx := context.Background()
		envs := browseFixture(t, s, 300, 4000)
		byID := map[string]*envelope.Envelope{}
		for _, e := range envs {
			byID[e.ID] = e
		}
		items := func(q BrowseQuery) []BatchItem {
			got, _ := browseAll(t, s, q)
			out := make([]BatchItem, len(got))
			for i, it := range got {
				out[i] = BatchItem{ID: it.Envelope.ID, Score: it.Score}
			}
			return out
		}
		if n, err := s.CountRange(ctx, StatePending, 0, 0); n != 300 || err != nil {
			t.Fatalf("CountRange = %d, %v", n, err)
		}
		lo, ok1, _ := s.EdgeScore(ctx, StatePending, 0, 0, false)
		hi, ok2, _ := s.EdgeScore(ctx, StatePending, 0, browseT0+1000, true)
		if !ok1 || !ok2 || lo < browseT0 || hi > browseT0+1000 || lo > hi {
			t.Fatalf("EdgeScore = %d %v, %d %v", lo, ok1, hi, ok2)
		}

		// Cancel route a's messages, checked against the filter again: a message of
		// route b passed in by mistake is left alone.
		qa := BrowseQuery{Route: "a"}
		ia := items(qa)
		ia = append(ia, BatchItem{ID: "m-0001", Score: byID["m-0001"].DueAt}) // route b
		res, err := s.CancelBatch(ctx, ia, qa, browseT0)
		if err != nil {
			t.Fatalf("CancelBatch: %v", err)
		}
		for i, r := range res[:len(res)-1] {
			if r.Prior != StatePending || r.Route != "a" {
				t.Fatalf("cancel %s: %+v", ia[i].ID, r)
			}
		}
		if r := res[len(res)-1]; r.Prior != StateUnknown {
			t.Fatalf("route b message in a route a cancel: %+v, want left alone", r)
		}
		if st, _, _, _ := s.Get(ctx, "m-0001"); st != StatePending {
			t.Fatalf("m-0001 is %q", st)
		}
		if st, _, _, _ := s.Get(ctx, ia[0].ID); st != StateCancelled {
			t.Fatalf("%s is %q, want cancelled", ia[0].ID, st)
		}
		// Again: already cancelled, nothing happens.
		res, _ = s.CancelBatch(ctx, ia[:1], qa, browseT0)
		if res[0].Prior != StateCancelled {
			t.Fatalf("second cancel: %+v", res[0])
		}

		// Reschedule route b by +1000 ms; an item seen at a stale score is left alone.
		ib := items(BrowseQuery{Route: "b"})
		ri := make([]RescheduleItem, len(ib))
		for i, it := range ib {
			ri[i] = RescheduleItem{BatchItem: it, Due: it.Score + 1000}
		}
		ri[0].Score-- // seen at another due time
		res, err = s.RescheduleBatch(ctx, ri)
		if err != nil {
			t.Fatalf("RescheduleBatch: %v", err)
		}
		for i, r := range res {
			st, score, e, _ := s.Get(ctx, ri[i].ID)
			if i == 0 {
				if r.Prior != StateUnknown || score != ib[0].Score {
					t.Fatalf("stale item: %+v, score %d", r, score)
				}
				continue
			}
			if r.Prior != StatePending || st != StatePending || score != ri[i].Due || e.DueAt != ri[i].Due {
				t.Fatalf("reschedule %s: %+v, now %s at %d (envelope %d), want %d", ri[i].ID, r, st, score, e.DueAt, ri[i].Due)
			}
		}
		// Applied twice: the scores moved, so nothing moves again.
		res, _ = s.RescheduleBatch(ctx, ri[1:2])
		if _, score, _, _ := s.Get(ctx, ri[1].ID); res[0].Prior != StateUnknown || score != ri[1].Due {
			t.Fatalf("second reschedule: %+v, score %d", res[0], score)
		}

		// Dead letters: bury some, requeue half, purge the rest.
		var dead []*envelope.Envelope
		for i := range 20 {
			dead = append(dead, &envelope.Envelope{ID: fmt.Sprintf("d-%02d", i), Route: "a", SourceBroker: envelope.BrokerKafka,
				Source: "t", DueAt: browseT0, Payload: []byte("x"), Reason: "broken"})
		}
		if _, err := s.Bury(ctx, dead, browseT0+5); err != nil {
			t.Fatalf("Bury: %v", err)
		}
		id := items(BrowseQuery{State: StateDead})
		if len(id) != 20 {
			t.Fatalf("%d dead letters", len(id))
		}
		res, err = s.RequeueDeadBatch(ctx, id[:10], browseT0+9)
		if err != nil {
			t.Fatalf("RequeueDeadBatch: %v", err)
		}
		for i, r := range res {
			st, score, e, _ := s.Get(ctx, id[i].ID)
			if r.Prior != StateDead || st != StatePending || score != browseT0+9 || e.Reason != "" || e.Attempt != 0 {
				t.Fatalf("requeue %s: %+v, now %s at %d %+v", id[i].ID, r, st, score, e)
			}
		}
		flags, err := s.PurgeDeadBatch(ctx, id) // the requeued half is no longer dead
		if err != nil {
			t.Fatalf("PurgeDeadBatch: %v", err)
		}
		for i, f := range flags {
			st, _, _, _ := s.Get(ctx, id[i].ID)
			if f != (i >= 10) || (i >= 10 && st != StateUnknown) || (i < 10 && st != StatePending) {
				t.Fatalf("purge %s: deleted %v, now %q", id[i].ID, f, st)
			}
		}
		if n, _ := s.CountRange(ctx, StateDead, 0, 0); n != 0 {
			t.Fatalf("%d dead letters left", n)
		}
	})
}

func TestJobKeysShareTheClusterSlot(t *testing.T) {
	s := &Store{opt: Options{Prefix: "p", Cluster: "c"}}
	for _, k := range []string{s.jobKey("x"), s.jobsKey(), s.activeKey()} {
		if want := "p:{c}:"; k[:len(want)] != want {
			t.Fatalf("key %q outside the cluster's hash tag", k)
		}
	}
}
