package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Bulk job records (create, list, claim, save, take over, cancel) and the batch
// operations a job applies.

func init() {
	register("JobRecords", caseJobRecords)
	register("JobTakeOverAndCancel", caseJobTakeOverAndCancel)
	register("CancelBatch", caseCancelBatch)
	register("RescheduleBatch", caseRescheduleBatch)
	register("RequeueAndPurgeDeadBatch", caseRequeueAndPurgeDeadBatch)
}

var cancelSpec = storeapi.JobSpec{Kind: storeapi.JobCancel, Filter: storeapi.JobFilter{Route: "orders"}}

func mustCreateJob(t *testing.T, s storeapi.Store, spec storeapi.JobSpec, now int64) storeapi.Job {
	t.Helper()
	j, err := s.CreateJob(storeCtx(t), spec, now)
	if err != nil || j.ID == "" || j.State != storeapi.JobQueued || j.Created != now {
		t.Fatalf("CreateJob = %+v, %v", j, err)
	}
	return j
}

func mustGetJob(t *testing.T, s storeapi.Store, id string, now int64, want storeapi.JobState) storeapi.Job {
	t.Helper()
	j, err := s.GetJob(storeCtx(t), id, now)
	if err != nil || j.State != want {
		t.Fatalf("GetJob(%s) = %q, %v; want %q", id, j.State, err, want)
	}
	return j
}

func activeJobs(t *testing.T, s storeapi.Store) []string {
	t.Helper()
	ids, err := s.ActiveJobs(storeCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

func caseJobRecords(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	if _, err := s.CreateJob(ctx, storeapi.JobSpec{Kind: "explode"}, t0); !errors.Is(err, storeapi.ErrInvalid) {
		t.Fatalf("CreateJob(bad kind) = %v, want ErrInvalid", err)
	}
	if _, err := s.GetJob(ctx, "nope", t0); !errors.Is(err, storeapi.ErrJobNotFound) {
		t.Fatalf("GetJob(unknown) = %v, want ErrJobNotFound", err)
	}
	a := mustCreateJob(t, s, cancelSpec, t0)
	b := mustCreateJob(t, s, storeapi.JobSpec{Kind: storeapi.JobReschedule, ShiftMs: 5000}, t0+1)
	c := mustCreateJob(t, s, storeapi.JobSpec{Kind: storeapi.JobPurgeDead}, t0+2)
	// Validate filled the defaults in, and the record keeps them.
	if got := mustGetJob(t, s, b.ID, t0+3, storeapi.JobQueued); got.Spec.Filter.State != storeapi.StatePending || got.Spec.ShiftMs != 5000 {
		t.Fatalf("job spec read back = %+v", got.Spec)
	}
	list, err := s.ListJobs(ctx, 10, t0+3)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, j := range list {
		listed = append(listed, j.ID)
	}
	if !slices.Equal(listed, []string{c.ID, b.ID, a.ID}) {
		t.Fatalf("ListJobs = %v, want newest first %v", listed, []string{c.ID, b.ID, a.ID})
	}
	if two, _ := s.ListJobs(ctx, 2, t0+3); len(two) != 2 || two[0].ID != c.ID {
		t.Fatalf("ListJobs(2) = %+v", two)
	}
	want := []string{a.ID, b.ID, c.ID}
	slices.Sort(want)
	if got := activeJobs(t, s); !slices.Equal(got, want) {
		t.Fatalf("ActiveJobs = %v, want %v", got, want)
	}

	// One runner at a time.
	j, ok, err := s.ClaimJob(ctx, a.ID, "i1", t0+10)
	if err != nil || !ok || j.State != storeapi.JobRunning || j.Instance != "i1" || j.Claims != 1 || j.Heartbeat != t0+10 {
		t.Fatalf("ClaimJob = %+v %v %v", j, ok, err)
	}
	if _, ok, err := s.ClaimJob(ctx, a.ID, "i2", t0+20); err != nil || ok {
		t.Fatalf("ClaimJob of a running job = %v %v, want refused", ok, err)
	}
	if err := s.SaveJob(ctx, a.ID, "i2", storeapi.JobProgress{Done: 1}, "", t0+20); !errors.Is(err, storeapi.ErrJobLost) {
		t.Fatalf("SaveJob by another instance = %v, want ErrJobLost", err)
	}
	p := storeapi.JobProgress{Matched: 7, Done: 4, Skipped: 2, Failed: 1, Cursor: "c1", LastError: "boom", Exact: true,
		Sample: []storeapi.JobSample{{ID: "x", Route: "orders", Score: t0}}}
	if err := s.SaveJob(ctx, a.ID, "i1", p, "", t0+30); err != nil {
		t.Fatal(err)
	}
	got := mustGetJob(t, s, a.ID, t0+31, storeapi.JobRunning)
	if got.Heartbeat != t0+30 || got.Updated != t0+30 || got.Progress.Matched != 7 || got.Progress.Done != 4 ||
		got.Progress.Skipped != 2 || got.Progress.Failed != 1 || got.Progress.Cursor != "c1" ||
		got.Progress.LastError != "boom" || !got.Progress.Exact || !slices.Equal(got.Progress.Sample, p.Sample) {
		t.Fatalf("job after save = %+v", got)
	}
	p.Done = 6
	if err := s.SaveJob(ctx, a.ID, "i1", p, storeapi.JobDone, t0+40); err != nil {
		t.Fatal(err)
	}
	if got := mustGetJob(t, s, a.ID, t0+41, storeapi.JobDone); got.Progress.Done != 6 {
		t.Fatalf("finished job progress = %+v", got.Progress)
	}
	if slices.Contains(activeJobs(t, s), a.ID) {
		t.Fatal("a finished job is still active")
	}
	if err := s.SaveJob(ctx, a.ID, "i1", p, "", t0+50); !errors.Is(err, storeapi.ErrJobLost) {
		t.Fatalf("SaveJob of a finished job = %v, want ErrJobLost", err)
	}
	if _, ok, err := s.ClaimJob(ctx, a.ID, "i2", t0+60); err != nil || ok {
		t.Fatalf("ClaimJob of a finished job = %v %v", ok, err)
	}
}

func caseJobTakeOverAndCancel(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	j := mustCreateJob(t, s, cancelSpec, t0)
	if _, ok, err := s.ClaimJob(ctx, j.ID, "i1", t0); err != nil || !ok {
		t.Fatalf("ClaimJob = %v %v", ok, err)
	}
	stale := t0 + storeapi.JobStaleAfter.Milliseconds() + 1
	mustGetJob(t, s, j.ID, stale-2, storeapi.JobRunning)
	mustGetJob(t, s, j.ID, stale, storeapi.JobAbandoned)
	taken, ok, err := s.ClaimJob(ctx, j.ID, "i2", stale)
	if err != nil || !ok || taken.Instance != "i2" || taken.Claims != 2 {
		t.Fatalf("ClaimJob of an abandoned job = %+v %v %v", taken, ok, err)
	}
	if err := s.SaveJob(ctx, j.ID, "i1", storeapi.JobProgress{}, "", stale+1); !errors.Is(err, storeapi.ErrJobLost) {
		t.Fatalf("SaveJob by the old runner = %v, want ErrJobLost", err)
	}
	// An operator cancels it: the runner's next save fails, the job is no longer active.
	if prior, err := s.CancelJob(ctx, j.ID, stale+2); err != nil || prior != storeapi.JobRunning {
		t.Fatalf("CancelJob = %q, %v", prior, err)
	}
	mustGetJob(t, s, j.ID, stale+3, storeapi.JobCancelled)
	if err := s.SaveJob(ctx, j.ID, "i2", storeapi.JobProgress{}, "", stale+3); !errors.Is(err, storeapi.ErrJobLost) {
		t.Fatalf("SaveJob after cancel = %v, want ErrJobLost", err)
	}
	if prior, err := s.CancelJob(ctx, j.ID, stale+4); err != nil || prior != storeapi.JobCancelled {
		t.Fatalf("CancelJob again = %q, %v", prior, err)
	}
	q := mustCreateJob(t, s, cancelSpec, t0+5)
	if prior, err := s.CancelJob(ctx, q.ID, t0+6); err != nil || prior != storeapi.JobQueued {
		t.Fatalf("CancelJob(queued) = %q, %v", prior, err)
	}
	if _, ok, err := s.ClaimJob(ctx, q.ID, "i1", t0+7); err != nil || ok {
		t.Fatalf("ClaimJob of a cancelled job = %v %v", ok, err)
	}
	if got := activeJobs(t, s); len(got) != 0 {
		t.Fatalf("ActiveJobs = %v, want none", got)
	}
	if _, err := s.CancelJob(ctx, "nope", t0); !errors.Is(err, storeapi.ErrJobNotFound) {
		t.Fatalf("CancelJob(unknown) = %v, want ErrJobNotFound", err)
	}
}

// item is a batch item for id at its current score.
func item(t *testing.T, s storeapi.Store, id string) storeapi.BatchItem {
	t.Helper()
	_, score, _, err := s.Get(storeCtx(t), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return storeapi.BatchItem{ID: id, Score: score}
}

func priors(res []storeapi.BatchResult) []storeapi.State {
	out := make([]storeapi.State, len(res))
	for i, r := range res {
		out[i] = r.Prior
		if r.Err != nil {
			out[i] = storeapi.State("error: " + r.Err.Error())
		}
	}
	return out
}

func caseCancelBatch(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	ids := idsOnShard(s, 1, 6, "cb") // 0 pending, 1 in flight, 2 dead, 3 delivered, 4 other route, 5 unknown
	mustPark(t, s, env(ids[0], t0+60_000), env(ids[1], t0), env(ids[2], t0), env(ids[3], t0), envOn(ids[4], "pay", t0+60_000))
	tok := mustLease(t, s, 1, "i1")
	items, _ := mustClaim(t, s, 1, tok, t0, 10) // ids 1..3
	if len(items) != 3 {
		t.Fatalf("claimed %v", ids)
	}
	byID := map[string]*envelope.Envelope{}
	for _, e := range items {
		byID[e.ID] = e
	}
	if err := s.Retry(ctx, 1, []storeapi.RetryItem{{Env: byID[ids[2]], Dead: true}}, t0+1); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, 1, []string{ids[3]}, t0+2); err != nil {
		t.Fatal(err)
	}
	batch := []storeapi.BatchItem{item(t, s, ids[0]), item(t, s, ids[1]), item(t, s, ids[2]), item(t, s, ids[3]),
		item(t, s, ids[4]), {ID: ids[5], Score: t0}}
	q := storeapi.BrowseQuery{Route: "orders"}
	res, err := s.CancelBatch(ctx, batch, q, t0+10)
	if err != nil {
		t.Fatal(err)
	}
	want := []storeapi.State{storeapi.StatePending, storeapi.StateInflight, storeapi.StateDead, storeapi.StateDelivered,
		storeapi.StateUnknown, storeapi.StateUnknown}
	if got := priors(res); !slices.Equal(got, want) {
		t.Fatalf("CancelBatch priors = %v, want %v", got, want)
	}
	for i := range 3 {
		if res[i].Route != "orders" {
			t.Fatalf("CancelBatch route of %s = %q", ids[i], res[i].Route)
		}
		wantState(t, s, ids[i], storeapi.StateCancelled, doneSec(t0+10))
	}
	wantState(t, s, ids[3], storeapi.StateDelivered, doneSec(t0+2))
	wantState(t, s, ids[4], storeapi.StatePending, t0+60_000) // another route: left alone
	wantState(t, s, ids[5], storeapi.StateUnknown, 0)         // no tombstone
	// Applied again, it changes nothing.
	res, err = s.CancelBatch(ctx, batch, q, t0+20)
	if err != nil {
		t.Fatal(err)
	}
	want = []storeapi.State{storeapi.StateCancelled, storeapi.StateCancelled, storeapi.StateCancelled, storeapi.StateDelivered,
		storeapi.StateUnknown, storeapi.StateUnknown}
	if got := priors(res); !slices.Equal(got, want) {
		t.Fatalf("CancelBatch again: priors = %v, want %v", got, want)
	}
	wantState(t, s, ids[0], storeapi.StateCancelled, doneSec(t0+10))
	wantCounts(t, s, "after the batch cancel", map[string]rc{"pay": {Pending: 1}})
}

func caseRescheduleBatch(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	ids := idsOnShard(s, 3, 4, "rb") // 0, 1 pending; 2 in flight; 3 unknown
	mustPark(t, s, env(ids[0], t0+60_000), env(ids[1], t0+60_000), env(ids[2], t0))
	tok := mustLease(t, s, 3, "i1")
	if items, _ := mustClaim(t, s, 3, tok, t0, 10); len(items) != 1 {
		t.Fatalf("claimed %v", ids)
	}
	batch := []storeapi.RescheduleItem{
		{BatchItem: storeapi.BatchItem{ID: ids[0], Score: t0 + 60_000}, Due: t0 + 5_000},
		{BatchItem: storeapi.BatchItem{ID: ids[1], Score: t0 + 59_999}, Due: t0 + 5_000}, // seen at another time
		{BatchItem: item(t, s, ids[2]), Due: t0 + 5_000},
		{BatchItem: storeapi.BatchItem{ID: ids[3], Score: t0}, Due: t0 + 5_000},
	}
	res, err := s.RescheduleBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []storeapi.State{storeapi.StatePending, storeapi.StateUnknown, storeapi.StateInflight, storeapi.StateUnknown}
	if got := priors(res); !slices.Equal(got, want) {
		t.Fatalf("RescheduleBatch priors = %v, want %v", got, want)
	}
	if res[0].Route != "orders" {
		t.Fatalf("RescheduleBatch route = %q", res[0].Route)
	}
	if e := wantState(t, s, ids[0], storeapi.StatePending, t0+5_000); e.DueAt != t0+5_000 {
		t.Fatalf("rescheduled DueAt = %d", e.DueAt)
	}
	wantState(t, s, ids[1], storeapi.StatePending, t0+60_000)
	// Applied again, the moved message is no longer where the batch saw it.
	res, err = s.RescheduleBatch(ctx, batch[:1])
	if err != nil || res[0].Prior != storeapi.StateUnknown {
		t.Fatalf("RescheduleBatch again = %v, %v", priors(res), err)
	}
	wantState(t, s, ids[0], storeapi.StatePending, t0+5_000)
	wantCounts(t, s, "after the batch reschedule", map[string]rc{"orders": {Pending: 2, Inflight: 1}})
}

func caseRequeueAndPurgeDeadBatch(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	ids := idsOnShard(s, 0, 5, "db") // 0..3 dead at t0+100+i; 4 pending
	var dead []*envelope.Envelope
	for i := range 4 {
		e := env(ids[i], t0)
		e.Reason, e.Attempt = "bad", 3
		dead = append(dead, e)
		if _, err := s.Bury(ctx, []*envelope.Envelope{e}, t0+100+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	mustPark(t, s, env(ids[4], t0+60_000))
	res, err := s.RequeueDeadBatch(ctx, []storeapi.BatchItem{
		{ID: ids[0], Score: t0 + 100},
		{ID: ids[1], Score: t0 + 999}, // seen at another time
		item(t, s, ids[4]),
	}, t0+7_000)
	if err != nil {
		t.Fatal(err)
	}
	want := []storeapi.State{storeapi.StateDead, storeapi.StateUnknown, storeapi.StateUnknown}
	if got := priors(res); !slices.Equal(got, want) {
		t.Fatalf("RequeueDeadBatch priors = %v, want %v", got, want)
	}
	if e := wantState(t, s, ids[0], storeapi.StatePending, t0+7_000); e.Reason != "" || e.Attempt != 0 || e.DueAt != t0+7_000 {
		t.Fatalf("requeued envelope = reason %q attempt %d due %d", e.Reason, e.Attempt, e.DueAt)
	}
	wantState(t, s, ids[1], storeapi.StateDead, t0+101)
	wantState(t, s, ids[4], storeapi.StatePending, t0+60_000)

	flags, err := s.PurgeDeadBatch(ctx, []storeapi.BatchItem{
		{ID: ids[1], Score: t0 + 101},
		{ID: ids[2], Score: t0 + 1}, // seen at another time
		{ID: ids[0], Score: t0 + 7_000},
		{ID: ids[3], Score: t0 + 103},
		{ID: "never", Score: t0},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(flags, []bool{true, false, false, true, false}) {
		t.Fatalf("PurgeDeadBatch = %v", flags)
	}
	wantState(t, s, ids[1], storeapi.StateUnknown, 0)
	wantState(t, s, ids[2], storeapi.StateDead, t0+102)
	wantState(t, s, ids[0], storeapi.StatePending, t0+7_000)
	wantCounts(t, s, "after the batch requeue and purge", map[string]rc{"orders": {Pending: 2, Dead: 1}})
	// Purged ids are not remembered.
	if parked := mustPark(t, s, dead[3]); !parked[0] {
		t.Fatal("a purged dead letter's id was refused by park")
	}
}
