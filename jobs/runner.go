// Package jobs runs bulk jobs (docs/CONTRACT.md §6): cancel, reschedule, requeue_dead
// and purge_dead over a browse filter, recorded in Redis by store/redisstore so that any
// instance answers for any job.
//
// Every bridge instance runs one Runner. It polls the store's active jobs and claims
// queued ones, and running ones whose heartbeat went stale (their instance died: the
// job reads "abandoned" until then); a claimed job runs on one goroutine owned by the
// Runner, from the cursor stored in its record. A job works in bounded batches: one
// browse page (Options.Batch messages), the by-id operation applied to the page in two
// pipelined round trips, the progress (counters, cursor, heartbeat) written to the
// record, then a pause on the injected clock at least as long as the batch took, so a job
// over millions of messages never holds Redis for long nor starves the pumps. A batch applied twice changes nothing
// the second time (every operation is guarded by the state and score it read), and a
// shift walks the due times in windows no wider than the shift, against its direction,
// so a moved message never meets the job again: a job resumed by another instance
// processes each message once.
//
// Goroutines: Run (the poll loop) and one per running job; all stop when Run's context
// ends, and Run returns after they have. A job stopped that way stays "running" in
// Redis, reads "abandoned" after storeapi.JobStaleAfter and is resumed by the next runner
// that polls.
package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Options configure a Runner. Zero values take the defaults.
type Options struct {
	Instance string      // this instance's name (recorded as the job's runner); required
	Clock    clock.Clock // default the real clock
	Log      *slog.Logger
	// Batch is the number of messages per step (a browse page); default 500, at most
	// storeapi.BrowseMaxLimit.
	Batch int
	// Pause is the least wait between batches; default 20 ms. The wait is at least as
	// long as the batch took, so a job keeps Redis busy at most about half the time.
	// Negative: no wait (tests).
	Pause time.Duration
	// Poll is how often the store is asked for jobs to run; default 2 s (Kick starts a
	// poll at once).
	Poll time.Duration
	// MaxJobs is how many jobs this runner runs at once; default 2.
	MaxJobs int
	// DryRunMaxScan bounds the messages a dry run with a route, id or key filter
	// examines; beyond it the count is a lower bound (Exact false). Default 1,000,000.
	DryRunMaxScan int
	// OnInflightCancelled is told the ids of in-flight messages a cancel job removed,
	// so that whichever wheel holds them drops them. Default: PublishCancel each.
	OnInflightCancelled func(ctx context.Context, ids []string)
	// OnCancelled, if set, is told the ids a cancel job cancelled, per route (for the
	// cancelled receipts). It must not wait for a broker.
	OnCancelled func(route string, ids []string)
	// Observer counts what cancel and reschedule jobs changed (Cancelled,
	// Rescheduled per route), as the single-id operations do. Default observe.Nop.
	Observer observe.Observer
	// OnWake is told the earliest new due time per shard after a batch that
	// rescheduled or requeued messages (pumps may sleep past it). Default: nothing (the
	// pumps' periodic scan finds them).
	OnWake func(ctx context.Context, minDue map[int]int64)
}

// Runner claims and runs jobs. Create it with New and run it with Run.
type Runner struct {
	st   storeapi.Store
	opt  Options
	kick chan struct{}

	mu      sync.Mutex
	running map[string]bool
}

// New returns a Runner over st.
func New(st storeapi.Store, opt Options) *Runner {
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Observer == nil {
		opt.Observer = observe.Nop{}
	}
	if opt.Batch <= 0 {
		opt.Batch = 500
	}
	opt.Batch = min(opt.Batch, storeapi.BrowseMaxLimit)
	if opt.Pause == 0 {
		opt.Pause = 20 * time.Millisecond
	}
	if opt.Poll <= 0 {
		opt.Poll = 2 * time.Second
	}
	if opt.MaxJobs <= 0 {
		opt.MaxJobs = 2
	}
	if opt.DryRunMaxScan <= 0 {
		opt.DryRunMaxScan = 1_000_000
	}
	if opt.OnInflightCancelled == nil {
		opt.OnInflightCancelled = func(ctx context.Context, ids []string) {
			for _, id := range ids {
				if err := st.PublishCancel(ctx, id); err != nil {
					opt.Log.Warn("broadcast cancel of an in-flight message", "id", id, "err", err)
				}
			}
		}
	}
	return &Runner{st: st, opt: opt, kick: make(chan struct{}, 1), running: map[string]bool{}}
}

// Kick makes Run poll for jobs now (after a job was created here). It never blocks.
func (r *Runner) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run polls for jobs and runs them until ctx ends, then waits for the job goroutines
// to stop and returns ctx.Err().
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		r.poll(ctx, &wg)
		t := r.opt.Clock.NewTimer(r.opt.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-r.kick:
		case <-t.C():
		}
		t.Stop()
	}
}

// poll claims what this runner has room for among the active jobs.
func (r *Runner) poll(ctx context.Context, wg *sync.WaitGroup) {
	ids, err := r.st.ActiveJobs(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.opt.Log.Debug("list active jobs", "err", err)
		}
		return
	}
	for _, id := range ids {
		r.mu.Lock()
		busy, full := r.running[id], len(r.running) >= r.opt.MaxJobs
		r.mu.Unlock()
		if full {
			return
		}
		if busy {
			continue
		}
		job, ok, err := r.st.ClaimJob(ctx, id, r.opt.Instance, clock.NowMs(r.opt.Clock))
		if err != nil || !ok {
			continue
		}
		r.mu.Lock()
		r.running[id] = true
		r.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				r.mu.Lock()
				delete(r.running, id)
				r.mu.Unlock()
				r.Kick() // room for another
			}()
			r.runJob(ctx, job)
		}()
	}
}

// runJob runs one claimed job to its end, or until ctx ends or the job is lost.
func (r *Runner) runJob(ctx context.Context, job storeapi.Job) {
	ex := &execution{r: r, job: job, prog: job.Progress}
	err := ex.run(ctx)
	switch {
	case err == nil:
		r.opt.Log.Info("bulk job done", "job", job.ID, "kind", job.Spec.Kind, "dry_run", job.Spec.DryRun,
			"matched", ex.prog.Matched, "done", ex.prog.Done, "skipped", ex.prog.Skipped, "failed", ex.prog.Failed)
	case ctx.Err() != nil:
		// Stopping: the job stays running in Redis and is resumed after JobStaleAfter.
	case errors.Is(err, storeapi.ErrJobLost):
		r.opt.Log.Info("bulk job stopped: cancelled, or taken over by another instance", "job", job.ID, "err", err)
	default:
		r.opt.Log.Warn("bulk job failed", "job", job.ID, "kind", job.Spec.Kind, "err", err)
		ex.prog.LastError = err.Error()
		if serr := r.st.SaveJob(ctx, job.ID, r.opt.Instance, ex.prog, storeapi.JobFailed, clock.NowMs(r.opt.Clock)); serr != nil {
			r.opt.Log.Warn("record a failed bulk job", "job", job.ID, "err", serr)
		}
	}
}
