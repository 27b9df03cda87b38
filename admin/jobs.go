package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Job kinds (POST /v1/jobs "kind").
const (
	// JobCancel cancels the pending (default) or dead messages the filter matches.
	JobCancel = "cancel"
	// JobReschedule gives the pending messages the filter matches a new due time:
	// DeliverAt, or their own due time moved by ShiftMs.
	JobReschedule = "reschedule"
	// JobRequeueDead moves the dead letters the filter matches back to pending, due now.
	JobRequeueDead = "requeue_dead"
	// JobPurgeDead deletes the dead letters the filter matches.
	JobPurgeDead = "purge_dead"
)

// JobKinds lists every kind.
var JobKinds = []string{JobCancel, JobReschedule, JobRequeueDead, JobPurgeDead}

// Job states.
const (
	JobQueued    = "queued"    // recorded, not started yet
	JobRunning   = "running"   // an instance is working through it
	JobDone      = "done"      // finished (Failed may still be non-zero)
	JobFailed    = "failed"    // stopped by an error (Errors says which)
	JobAbandoned = "abandoned" // its instance stopped heartbeating before it finished
)

// Job limits.
const (
	DefaultJobSample = 10
	MaxJobSample     = 100
	DefaultJobList   = 20
	MaxJobList       = 100
	// MaxJobErrors is how many error texts a Job keeps (the first ones).
	MaxJobErrors = 20
)

// JobSpec is what a job does: validated and normalised by the server before a Backend
// sees it (Filter.State is set: pending for cancel and reschedule unless the body said
// dead for cancel, dead for requeue_dead and purge_dead).
type JobSpec struct {
	Kind   string `json:"kind"`
	Filter Filter `json:"filter"`
	// DeliverAt (unix ms) or ShiftMs (may be negative): reschedule only, exactly one.
	DeliverAt int64 `json:"deliver_at,omitempty"`
	ShiftMs   int64 `json:"shift_ms,omitempty"`
}

// JobBody is the body of POST /v1/jobs.
type JobBody struct {
	Kind      string     `json:"kind"`
	Filter    Filter     `json:"filter"`
	DeliverAt *Timestamp `json:"deliver_at,omitempty"`
	ShiftMs   *int64     `json:"shift_ms,omitempty"`
	// DryRun: count and sample what the job would touch (200), change nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Sample is how many matching messages a dry run returns (default 10, at most 100).
	Sample *int `json:"sample,omitempty"`
}

// Spec validates b and returns the normalised JobSpec and the sample size.
func (b JobBody) Spec() (JobSpec, int, error) {
	if b.Kind == "" {
		return JobSpec{}, 0, Invalid("kind", "is required: one of %s", strings.Join(JobKinds, ", "))
	}
	if !slices.Contains(JobKinds, b.Kind) {
		return JobSpec{}, 0, Invalid("kind", "want one of %s, got %q", strings.Join(JobKinds, ", "), b.Kind)
	}
	if err := b.Filter.Check("filter."); err != nil {
		return JobSpec{}, 0, err
	}
	spec := JobSpec{Kind: b.Kind, Filter: b.Filter}
	if err := spec.normaliseState(); err != nil {
		return JobSpec{}, 0, err
	}
	if err := b.when(&spec); err != nil {
		return JobSpec{}, 0, err
	}
	sample := DefaultJobSample
	if b.Sample != nil {
		if !b.DryRun {
			return JobSpec{}, 0, Invalid("sample", "only with dry_run")
		}
		if *b.Sample < 0 || *b.Sample > MaxJobSample {
			return JobSpec{}, 0, Invalid("sample", "want 0 to %d, got %d", MaxJobSample, *b.Sample)
		}
		sample = *b.Sample
	}
	return spec, sample, nil
}

// normaliseState fills Filter.State with the kind's default and refuses the others.
func (s *JobSpec) normaliseState() error {
	allowed := map[string][]string{
		JobCancel:      {StatePending, StateDead},
		JobReschedule:  {StatePending},
		JobRequeueDead: {StateDead},
		JobPurgeDead:   {StateDead},
	}[s.Kind]
	if s.Filter.State == "" {
		s.Filter.State = allowed[0]
		return nil
	}
	if !slices.Contains(allowed, s.Filter.State) {
		return Invalid("filter.state", "a %s job works on %s messages, not %s",
			s.Kind, strings.Join(allowed, " or "), s.Filter.State)
	}
	return nil
}

// when checks deliver_at and shift_ms against the kind.
func (b JobBody) when(spec *JobSpec) error {
	if spec.Kind != JobReschedule {
		if b.DeliverAt != nil {
			return Invalid("deliver_at", "only for kind %s", JobReschedule)
		}
		if b.ShiftMs != nil {
			return Invalid("shift_ms", "only for kind %s", JobReschedule)
		}
		return nil
	}
	switch {
	case b.DeliverAt != nil && b.ShiftMs != nil:
		return Invalid("deliver_at", "set only one of deliver_at or shift_ms")
	case b.DeliverAt != nil:
		spec.DeliverAt = b.DeliverAt.UnixMilli()
	case b.ShiftMs != nil:
		if *b.ShiftMs == 0 {
			return Invalid("shift_ms", "must not be 0")
		}
		if d := *b.ShiftMs; d > maxShiftMs || d < -maxShiftMs {
			return Invalid("shift_ms", "beyond ±%d ms (10 years)", maxShiftMs)
		}
		spec.ShiftMs = *b.ShiftMs
	default:
		return Invalid("deliver_at", "a reschedule job needs deliver_at or shift_ms")
	}
	return nil
}

const maxShiftMs = int64(10 * 365 * 24 * time.Hour / time.Millisecond)

// JobPreview is the 200 answer of a dry run.
type JobPreview struct {
	DryRun bool    `json:"dry_run"` // always true
	Spec   JobSpec `json:"spec"`
	// Matched is how many messages the job would touch now.
	Matched int64 `json:"matched"`
	// Exact is false when counting stopped at the backend's budget for one request
	// (a route, id or key filter over very many messages): Matched is then a lower
	// bound; the job itself still goes through every match.
	Exact bool `json:"exact"`
	// Sample is the first matching messages (in browse order).
	Sample []Message `json:"sample"`
}

// Job is a bulk job (202 answer of POST /v1/jobs, GET /v1/jobs/{id}). Times are unix ms.
type Job struct {
	ID   string  `json:"id"`
	Spec JobSpec `json:"spec"`
	// State: queued, running, done, failed or abandoned.
	State string `json:"state"`
	// Matched counts the messages the job found so far; Done those it changed; Failed
	// those it could not (state changed meanwhile, or an error). Done+Failed <= Matched.
	Matched int64 `json:"matched"`
	Done    int64 `json:"done"`
	Failed  int64 `json:"failed"`
	// Errors are the first MaxJobErrors error texts.
	Errors    []string `json:"errors,omitempty"`
	CreatedAt int64    `json:"created_at"`
	UpdatedAt int64    `json:"updated_at"`
	// Instance is the instance that runs (or ran) it.
	Instance string `json:"instance,omitempty"`
}

// JobList is the body of GET /v1/jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
}

// Unimplemented answers ErrNotImplemented (HTTP 501) for the Backend methods added
// with browsing and bulk jobs. Embed it in a Backend that does not do them yet; the
// methods the embedding type defines win.
type Unimplemented struct{}

func notImplemented(what string) error {
	return fmt.Errorf("%w: %s is not available on this bridge yet", ErrNotImplemented, what)
}

func (Unimplemented) Browse(_ context.Context, q Query) (Page, error) {
	return Page{}, notImplemented("browsing " + q.Filter.State + " messages")
}

func (Unimplemented) PurgeDead(context.Context, Filter) (int64, error) {
	return 0, notImplemented("purging dead letters")
}

func (Unimplemented) PreviewJob(context.Context, JobSpec, int) (JobPreview, error) {
	return JobPreview{}, notImplemented("bulk jobs (dry run)")
}

func (Unimplemented) StartJob(context.Context, JobSpec) (Job, error) {
	return Job{}, notImplemented("bulk jobs")
}

func (Unimplemented) GetJob(context.Context, string) (Job, error) {
	return Job{}, notImplemented("bulk jobs")
}

func (Unimplemented) ListJobs(context.Context, int) ([]Job, error) {
	return nil, notImplemented("bulk jobs")
}
