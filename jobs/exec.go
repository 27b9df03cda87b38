package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// cursor is where a job is, stored (as JSON) in the job record after every batch.
type cursor struct {
	Pass int `json:"p"`
	// Shift jobs walk the pass in windows [Lo, Hi] no wider than the shift; Opened
	// says a window of this pass was opened before, Win that [Lo, Hi] is open now.
	Opened bool   `json:"o,omitempty"`
	Win    bool   `json:"w,omitempty"`
	Lo     int64  `json:"lo,omitempty"`
	Hi     int64  `json:"hi,omitempty"`
	Page   string `json:"c,omitempty"` // browse cursor within the pass or window
}

// pass is a score range walked in (score, id) order; noop passes only count (the
// messages already due at a reschedule's target time).
type pass struct {
	lo, hi int64
	noop   bool
}

type execution struct {
	r    *Runner
	job  storeapi.Job
	prog storeapi.JobProgress
	cur  cursor
}

func (ex *execution) now() int64 { return clock.NowMs(ex.r.opt.Clock) }

func (ex *execution) run(ctx context.Context) error {
	if ex.prog.Cursor != "" {
		if err := json.Unmarshal([]byte(ex.prog.Cursor), &ex.cur); err != nil {
			return fmt.Errorf("job %s: stored cursor: %w", ex.job.ID, err)
		}
	}
	if ex.job.Spec.DryRun {
		return ex.dryRun(ctx)
	}
	passes := ex.passes()
	bo := clock.NewBackoff(ex.r.opt.Clock, clock.BackoffPolicy{Initial: 100 * time.Millisecond, Max: storeapi.JobHeartbeat})
	for {
		// The heartbeat before each batch is also where a cancel by an operator, or
		// a take-over by another instance, is noticed: at most the batch under way
		// when it happened is applied after it.
		start := ex.r.opt.Clock.Now()
		err := ex.save(ctx, true)
		more := true
		if err == nil {
			more, err = ex.step(ctx, passes)
		}
		if err == nil {
			err = ex.save(ctx, more)
		}
		switch {
		case err == nil:
			bo.Reset()
		case errors.Is(err, storeapi.ErrJobLost), !fault.IsTransient(err) || ctx.Err() != nil:
			return err
		default:
			ex.r.opt.Log.Debug("bulk job step failed, retrying", "job", ex.job.ID, "err", err)
			if werr := bo.Wait(ctx); werr != nil {
				return werr
			}
			continue
		}
		if !more {
			return nil
		}
		if err := clock.Sleep(ctx, ex.r.opt.Clock, ex.r.pause(ex.r.opt.Clock.Now().Sub(start))); err != nil {
			return err
		}
	}
}

// pause is the wait after a batch that took took: Options.Pause, and at least took
// itself, so a job keeps Redis busy at most about half the time it runs.
func (r *Runner) pause(took time.Duration) time.Duration {
	if r.opt.Pause < 0 {
		return 0
	}
	return max(r.opt.Pause, took)
}

// save records the progress; without more, the job ends done.
func (ex *execution) save(ctx context.Context, more bool) error {
	raw, err := json.Marshal(ex.cur)
	if err != nil {
		return fmt.Errorf("encode cursor: %w", err)
	}
	ex.prog.Cursor = string(raw)
	final := storeapi.JobState("")
	if !more {
		final = storeapi.JobDone
	}
	return ex.r.st.SaveJob(ctx, ex.job.ID, ex.r.opt.Instance, ex.prog, final, ex.now())
}

// passes splits the filter's range: a reschedule to a fixed time first counts the
// messages already there, then walks below and above it, so a moved message (now at
// the target) is never met again.
func (ex *execution) passes() []pass {
	f := ex.job.Spec.Filter
	lo, hi := f.From, f.To
	if hi == 0 {
		hi = math.MaxInt64
	}
	t := ex.job.Spec.DueAt
	if ex.job.Spec.Kind != storeapi.JobReschedule || t == 0 {
		return []pass{{lo: lo, hi: hi}}
	}
	var out []pass
	for _, p := range []pass{{lo: t, hi: t, noop: true}, {lo: lo, hi: t - 1}, {lo: t + 1, hi: hi}} {
		p.lo, p.hi = max(p.lo, lo), min(p.hi, hi)
		if p.lo <= p.hi {
			out = append(out, p)
		}
	}
	return out
}

// query returns the browse query of the next batch, opening the next shift window when
// needed; ok is false when every pass is done.
func (ex *execution) query(ctx context.Context, passes []pass) (storeapi.BrowseQuery, pass, bool, error) {
	shift := ex.job.Spec.ShiftMs
	for ex.cur.Pass < len(passes) {
		p := passes[ex.cur.Pass]
		q := ex.job.Spec.Filter.Query()
		q.Limit, q.Cursor = ex.r.opt.Batch, ex.cur.Page
		if shift == 0 {
			q.From, q.To = p.lo, p.hi
			return q, p, true, nil
		}
		if !ex.cur.Win {
			ok, err := ex.openWindow(ctx, p, shift)
			if err != nil {
				return q, p, false, err
			}
			if !ok {
				ex.cur = cursor{Pass: ex.cur.Pass + 1}
				continue
			}
			// The window is recorded before anything in it moves: a runner resuming
			// after a crash must walk this window, not choose one again (the highest
			// or lowest due time may by then be a message this one just moved).
			if err := ex.save(ctx, true); err != nil {
				return q, p, false, err
			}
		}
		q.From, q.To = ex.cur.Lo, ex.cur.Hi
		return q, p, true, nil
	}
	return storeapi.BrowseQuery{}, pass{}, false, nil
}

// openWindow opens the next window of a shift: moving later, windows go from the
// highest due time down; moving earlier, from the lowest up; each at most |shift|
// wide, so what it moves lands beyond it, where the job has been already.
func (ex *execution) openWindow(ctx context.Context, p pass, shift int64) (bool, error) {
	st := ex.job.Spec.Filter.State
	width := shift
	if width < 0 {
		width = -width
	}
	if shift > 0 {
		top := p.hi
		if ex.cur.Opened {
			top = ex.cur.Lo - 1
		}
		if top < p.lo {
			return false, nil
		}
		m, ok, err := ex.r.st.EdgeScore(ctx, st, p.lo, top, true)
		if err != nil || !ok {
			return false, err
		}
		ex.cur.Lo, ex.cur.Hi = max(p.lo, m-width+1), m
	} else {
		bottom := p.lo
		if ex.cur.Opened {
			bottom = ex.cur.Hi + 1
		}
		if bottom > p.hi {
			return false, nil
		}
		m, ok, err := ex.r.st.EdgeScore(ctx, st, bottom, p.hi, false)
		if err != nil || !ok {
			return false, err
		}
		ex.cur.Lo, ex.cur.Hi = m, min(p.hi, m+width-1)
	}
	ex.cur.Opened, ex.cur.Win, ex.cur.Page = true, true, ""
	return true, nil
}

// maxWindowsPerStep bounds the shift windows one step walks: windows narrower than
// the gaps between due times hold a message or two each, and a step takes several of
// them (up to half a batch of messages) before it records progress and pauses.
const maxWindowsPerStep = 16

// step runs one batch; more is false when the job has nothing left.
func (ex *execution) step(ctx context.Context, passes []pass) (bool, error) {
	handled := 0
	for windows := 1; ; windows++ {
		q, p, ok, err := ex.query(ctx, passes)
		if err != nil || !ok {
			return false, err
		}
		q.Limit = ex.r.opt.Batch - handled
		page, err := ex.r.st.Browse(ctx, q)
		if err != nil {
			return false, fmt.Errorf("browse: %w", err)
		}
		if err := ex.apply(ctx, q, p, page.Items); err != nil {
			return false, err
		}
		handled += len(page.Items)
		ex.cur.Page = page.Next
		if page.Next != "" {
			return true, nil
		}
		if ex.job.Spec.ShiftMs == 0 {
			ex.cur = cursor{Pass: ex.cur.Pass + 1}
			return true, nil
		}
		ex.cur.Win = false
		if handled >= ex.r.opt.Batch/2 || windows == maxWindowsPerStep {
			return true, nil
		}
	}
}
