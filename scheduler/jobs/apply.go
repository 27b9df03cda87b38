package jobs

import (
	"context"
	"fmt"

	"github.com/delaybridge/delay-bridge/internal/clock"

	"github.com/delaybridge/delay-bridge/scheduler/store"
)

// apply runs the job's operation on one page and counts the outcome.
func (ex *execution) apply(ctx context.Context, q store.BrowseQuery, p pass, items []store.BrowseItem) error {
	if len(items) == 0 {
		return nil
	}
	batch := make([]store.BatchItem, len(items))
	for i, it := range items {
		batch[i] = store.BatchItem{ID: it.Envelope.ID, Score: it.Score}
	}
	if p.noop {
		// Already due at the reschedule's target time: nothing to change.
		ex.prog.Matched += int64(len(items))
		ex.prog.Done += int64(len(items))
		return nil
	}
	var (
		res []store.BatchResult
		ok  store.State // the Prior that means "changed"
		err error
	)
	now := ex.now()
	switch ex.job.Spec.Kind {
	case store.JobCancel:
		res, err = ex.r.st.CancelBatch(ctx, batch, q, now)
	case store.JobReschedule:
		res, err = ex.r.st.RescheduleBatch(ctx, ex.rescheduleItems(batch))
		ok = store.StatePending
	case store.JobRequeueDead:
		res, err = ex.r.st.RequeueDeadBatch(ctx, batch, now)
		ok = store.StateDead
	case store.JobPurgeDead:
		var flags []bool
		flags, err = ex.r.st.PurgeDeadBatch(ctx, batch)
		res = make([]store.BatchResult, len(flags))
		for i, f := range flags {
			if f {
				res[i].Prior = store.StateDead
			}
		}
		ok = store.StateDead
	default:
		return fmt.Errorf("job kind %q: %w", ex.job.Spec.Kind, store.ErrInvalid)
	}
	if err != nil {
		return err
	}
	ex.count(ctx, batch, res, ok)
	return nil
}

func (ex *execution) rescheduleItems(batch []store.BatchItem) []store.RescheduleItem {
	out := make([]store.RescheduleItem, len(batch))
	for i, it := range batch {
		due := ex.job.Spec.DueAt
		if ex.job.Spec.ShiftMs != 0 {
			due = max(0, it.Score+ex.job.Spec.ShiftMs)
		}
		out[i] = store.RescheduleItem{BatchItem: it, Due: due}
	}
	return out
}

// count adds a batch's results to the progress and tells the scheduler about in-flight
// cancels and earlier due times. ok is the Prior that means "changed" ("" for cancel:
// pending, inflight or dead).
func (ex *execution) count(ctx context.Context, batch []store.BatchItem, res []store.BatchResult, ok store.State) {
	var inflight []string
	minDue := map[int]int64{}
	perRoute := map[string]int{}
	now := ex.now()
	for i, r := range res {
		ex.prog.Matched++
		changed := r.Prior == ok
		if ok == "" {
			changed = r.Prior == store.StatePending || r.Prior == store.StateInflight || r.Prior == store.StateDead
		}
		switch {
		case r.Err != nil:
			ex.prog.Failed++
			ex.prog.LastError = r.Err.Error()
			continue
		case !changed:
			ex.prog.Skipped++
			continue
		}
		ex.prog.Done++
		perRoute[r.Route]++
		switch ex.job.Spec.Kind {
		case store.JobCancel:
			if r.Prior == store.StateInflight {
				inflight = append(inflight, batch[i].ID)
			}
		case store.JobReschedule, store.JobRequeueDead:
			due := now
			if ex.job.Spec.Kind == store.JobReschedule {
				due = ex.rescheduleItems(batch[i : i+1])[0].Due
			}
			sh := ex.r.st.ShardOf(batch[i].ID)
			if old, seen := minDue[sh]; !seen || due < old {
				minDue[sh] = due
			}
		}
	}
	for route, n := range perRoute {
		switch ex.job.Spec.Kind {
		case store.JobCancel:
			ex.r.opt.Observer.Cancelled(route, n)
		case store.JobReschedule:
			ex.r.opt.Observer.Rescheduled(route, n)
		}
	}
	if len(inflight) > 0 {
		ex.r.opt.OnInflightCancelled(ctx, inflight)
	}
	if len(minDue) > 0 && ex.r.opt.OnWake != nil {
		ex.r.opt.OnWake(ctx, minDue)
	}
}

// dryRun counts what the filter selects and keeps a sample, changing nothing: a
// ZCOUNT per shard when the filter is a state and a range, else pages of the browse
// (resumable from the cursor) up to DryRunMaxScan examined messages.
func (ex *execution) dryRun(ctx context.Context) error {
	f, spec := ex.job.Spec.Filter, ex.job.Spec
	sample := func(items []store.BrowseItem) {
		for _, it := range items {
			if len(ex.prog.Sample) < spec.Sample {
				ex.prog.Sample = append(ex.prog.Sample, store.JobSample{ID: it.Envelope.ID, Route: it.Envelope.Route, Score: it.Score})
			}
		}
	}
	if f.RangeOnly() {
		n, err := ex.r.st.CountRange(ctx, f.State, f.From, f.To)
		if err != nil {
			return err
		}
		q := f.Query()
		q.Limit = spec.Sample
		page, err := ex.r.st.Browse(ctx, q)
		if err != nil {
			return err
		}
		ex.prog.Sample = nil
		sample(page.Items)
		ex.prog.Matched, ex.prog.Exact = n, true
		return ex.save(ctx, false)
	}
	scanned := 0
	for {
		start := ex.r.opt.Clock.Now()
		q := f.Query()
		q.Limit, q.Cursor = store.BrowseMaxLimit, ex.cur.Page
		page, err := ex.r.st.Browse(ctx, q)
		if err != nil {
			return err
		}
		scanned += page.Scanned
		ex.prog.Matched += int64(len(page.Items))
		sample(page.Items)
		ex.cur.Page = page.Next
		if page.Next == "" || scanned >= ex.r.opt.DryRunMaxScan {
			ex.prog.Exact = page.Next == ""
			return ex.save(ctx, false)
		}
		if err := ex.save(ctx, true); err != nil {
			return err
		}
		if err := clock.Sleep(ctx, ex.r.opt.Clock, ex.r.pause(ex.r.opt.Clock.Now().Sub(start))); err != nil {
			return err
		}
	}
}
