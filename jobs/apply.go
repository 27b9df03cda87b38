package jobs

import (
	"context"
	"fmt"

	"github.com/delaybridge/delay-bridge/internal/clock"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// apply runs the job's operation on one page and counts the outcome.
func (ex *execution) apply(ctx context.Context, q storeapi.BrowseQuery, p pass, items []storeapi.BrowseItem) error {
	if len(items) == 0 {
		return nil
	}
	batch := make([]storeapi.BatchItem, len(items))
	for i, it := range items {
		batch[i] = storeapi.BatchItem{ID: it.Envelope.ID, Score: it.Score}
	}
	if p.noop {
		// Already due at the reschedule's target time: nothing to change.
		ex.prog.Matched += int64(len(items))
		ex.prog.Done += int64(len(items))
		return nil
	}
	var (
		res []storeapi.BatchResult
		ok  storeapi.State // the Prior that means "changed"
		err error
	)
	now := ex.now()
	switch ex.job.Spec.Kind {
	case storeapi.JobCancel:
		res, err = ex.r.st.CancelBatch(ctx, batch, q, now)
	case storeapi.JobReschedule:
		res, err = ex.r.st.RescheduleBatch(ctx, ex.rescheduleItems(batch))
		ok = storeapi.StatePending
	case storeapi.JobRequeueDead:
		res, err = ex.r.st.RequeueDeadBatch(ctx, batch, now)
		ok = storeapi.StateDead
	case storeapi.JobPurgeDead:
		var flags []bool
		flags, err = ex.r.st.PurgeDeadBatch(ctx, batch)
		res = make([]storeapi.BatchResult, len(flags))
		for i, f := range flags {
			if f {
				res[i].Prior = storeapi.StateDead
			}
		}
		ok = storeapi.StateDead
	default:
		return fmt.Errorf("job kind %q: %w", ex.job.Spec.Kind, storeapi.ErrInvalid)
	}
	if err != nil {
		return err
	}
	ex.count(ctx, batch, res, ok)
	return nil
}

func (ex *execution) rescheduleItems(batch []storeapi.BatchItem) []storeapi.RescheduleItem {
	out := make([]storeapi.RescheduleItem, len(batch))
	for i, it := range batch {
		due := ex.job.Spec.DueAt
		if ex.job.Spec.ShiftMs != 0 {
			due = max(0, it.Score+ex.job.Spec.ShiftMs)
		}
		out[i] = storeapi.RescheduleItem{BatchItem: it, Due: due}
	}
	return out
}

// count adds a batch's results to the progress and tells the scheduler about in-flight
// cancels and earlier due times. ok is the Prior that means "changed" ("" for cancel:
// pending, inflight or dead).
func (ex *execution) count(ctx context.Context, batch []storeapi.BatchItem, res []storeapi.BatchResult, ok storeapi.State) {
	var inflight []string
	minDue := map[int]int64{}
	perRoute := map[string]int{}
	cancelled := map[string][]string{} // by route: the cancelled receipts
	now := ex.now()
	for i, r := range res {
		ex.prog.Matched++
		changed := r.Prior == ok
		if ok == "" {
			changed = r.Prior == storeapi.StatePending || r.Prior == storeapi.StateInflight || r.Prior == storeapi.StateDead
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
		case storeapi.JobCancel:
			cancelled[r.Route] = append(cancelled[r.Route], batch[i].ID)
			if r.Prior == storeapi.StateInflight {
				inflight = append(inflight, batch[i].ID)
			}
		case storeapi.JobReschedule, storeapi.JobRequeueDead:
			due := now
			if ex.job.Spec.Kind == storeapi.JobReschedule {
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
		case storeapi.JobCancel:
			ex.r.opt.Observer.Cancelled(route, n)
			if ex.r.opt.OnCancelled != nil {
				ex.r.opt.OnCancelled(route, cancelled[route])
			}
		case storeapi.JobReschedule:
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
	sample := func(items []storeapi.BrowseItem) {
		for _, it := range items {
			if len(ex.prog.Sample) < spec.Sample {
				ex.prog.Sample = append(ex.prog.Sample, storeapi.JobSample{ID: it.Envelope.ID, Route: it.Envelope.Route, Score: it.Score})
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
		q.Limit, q.Cursor = storeapi.BrowseMaxLimit, ex.cur.Page
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
