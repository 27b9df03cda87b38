package storeapi

import (
	"fmt"
	"time"
)

// Bulk jobs (docs/CONTRACT.md §6): what a job does, its state and its progress, kept in
// the store so that any instance answers for any job. The runner that executes them is
// jobs; it applies the batch operations below to the pages it browses.

type JobKind string

const (
	JobCancel      JobKind = "cancel"       // cancel pending, in-flight or dead messages
	JobReschedule  JobKind = "reschedule"   // new due time: absolute (DueAt) or shifted (ShiftMs)
	JobRequeueDead JobKind = "requeue_dead" // dead letters back to pending, due when requeued
	JobPurgeDead   JobKind = "purge_dead"   // delete dead letters
)

// JobState is where a job is. JobAbandoned is never stored: it is how a running job
// reads when its heartbeat is older than JobStaleAfter (its instance died or lost
// Redis); any runner then takes it over and resumes it from its cursor.
type JobState string

const (
	JobQueued    JobState = "queued"
	JobRunning   JobState = "running"
	JobDone      JobState = "done"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
	JobAbandoned JobState = "abandoned"
)

// Job timing.
const (
	// JobHeartbeat is how often a runner writes a running job's heartbeat (at least:
	// every batch writes it too).
	JobHeartbeat = 5 * time.Second
	// JobStaleAfter: a running job whose heartbeat is older reads JobAbandoned and may
	// be claimed by another runner.
	JobStaleAfter = 3 * JobHeartbeat
	// JobRetention: how long a finished job's record is kept.
	JobRetention = 7 * 24 * time.Hour
	// JobSampleMax bounds a dry run's sample.
	JobSampleMax = 100
)

// maxShift bounds a reschedule's shift (100 years in ms), far from int64 overflow.
const maxShift = 100 * 365 * 24 * 3600 * 1000

// JobFilter selects a job's messages: a BrowseQuery without paging.
type JobFilter struct {
	State     State  `json:"state,omitempty"` // default pending (dead for the dead-letter kinds)
	Route     string `json:"route,omitempty"`
	From      int64  `json:"from,omitempty"` // score range, inclusive, unix ms; 0 = unbounded
	To        int64  `json:"to,omitempty"`
	IDPrefix  string `json:"id_prefix,omitempty"`
	KeyPrefix string `json:"key_prefix,omitempty"`
}

// Query is the filter as a BrowseQuery (first page).
func (f JobFilter) Query() BrowseQuery {
	return BrowseQuery{State: f.State, Route: f.Route, From: f.From, To: f.To, IDPrefix: f.IDPrefix, KeyPrefix: f.KeyPrefix}
}

// RangeOnly reports whether the filter selects by state and score range alone, so its
// count is a ZCOUNT per shard.
func (f JobFilter) RangeOnly() bool { return f.Route == "" && f.IDPrefix == "" && f.KeyPrefix == "" }

// JobSpec is what an operator asks for.
type JobSpec struct {
	Kind   JobKind   `json:"kind"`
	Filter JobFilter `json:"filter"`
	// DryRun: count the matches and return a sample; change nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Reschedule: exactly one of DueAt (new due time, unix ms) and ShiftMs (added to
	// each message's due time; negative moves earlier).
	DueAt   int64 `json:"due_at,omitempty"`
	ShiftMs int64 `json:"shift_ms,omitempty"`
	// Sample: how many matches a dry run returns (default 10, at most JobSampleMax).
	Sample int `json:"sample,omitempty"`
}

// Validate fills defaults and checks the spec; errors wrap ErrInvalid.
func (sp *JobSpec) Validate() error {
	f := &sp.Filter
	switch sp.Kind {
	case JobCancel:
		if f.State == "" {
			f.State = StatePending
		}
		if f.State != StatePending && f.State != StateInflight && f.State != StateDead {
			return fmt.Errorf("%w: a cancel job selects pending, inflight or dead messages, not %q", ErrInvalid, f.State)
		}
	case JobReschedule:
		if f.State == "" {
			f.State = StatePending
		}
		if f.State != StatePending {
			return fmt.Errorf("%w: a reschedule job selects pending messages, not %q", ErrInvalid, f.State)
		}
		if (sp.DueAt == 0) == (sp.ShiftMs == 0) {
			return fmt.Errorf("%w: a reschedule job needs exactly one of due_at and shift_ms", ErrInvalid)
		}
		if sp.DueAt < 0 {
			return fmt.Errorf("%w: due_at %d is negative", ErrInvalid, sp.DueAt)
		}
		if sp.ShiftMs > maxShift || sp.ShiftMs < -maxShift {
			return fmt.Errorf("%w: shift_ms %d is beyond ±%d (100 years)", ErrInvalid, sp.ShiftMs, maxShift)
		}
	case JobRequeueDead, JobPurgeDead:
		if f.State == "" {
			f.State = StateDead
		}
		if f.State != StateDead {
			return fmt.Errorf("%w: a %s job selects dead letters, not %q", ErrInvalid, sp.Kind, f.State)
		}
	default:
		return fmt.Errorf("%w: job kind %q (cancel, reschedule, requeue_dead, purge_dead)", ErrInvalid, sp.Kind)
	}
	if sp.Kind != JobReschedule && (sp.DueAt != 0 || sp.ShiftMs != 0) {
		return fmt.Errorf("%w: due_at and shift_ms belong to reschedule jobs", ErrInvalid)
	}
	if f.From < 0 || f.To < 0 || (f.To != 0 && f.From > f.To) {
		return fmt.Errorf("%w: score range [%d, %d]", ErrInvalid, f.From, f.To)
	}
	if sp.Sample <= 0 {
		sp.Sample = 10
	}
	sp.Sample = min(sp.Sample, JobSampleMax)
	return nil
}

// JobSample is one message a dry run would touch.
type JobSample struct {
	ID    string `json:"id"`
	Route string `json:"route"`
	Score int64  `json:"score"` // due time, lease deadline or time dead-lettered
}

// JobProgress is what a runner records after every batch.
type JobProgress struct {
	Matched int64 `json:"matched"` // messages the filter selected so far
	Done    int64 `json:"done"`    // changed as asked
	// Skipped: selected, but changed by something else before the job reached them
	// (fired, cancelled, requeued): left alone.
	Skipped int64  `json:"skipped"`
	Failed  int64  `json:"failed"` // could not be changed (LastError says why)
	Cursor  string `json:"cursor,omitempty"`
	// Dry runs: whether Matched is exact (false: the count stopped at its scan budget
	// and Matched is a lower bound), and the first matches.
	Exact     bool        `json:"exact,omitempty"`
	Sample    []JobSample `json:"sample,omitempty"`
	LastError string      `json:"last_error,omitempty"`
}

// Job is a job record as read back.
type Job struct {
	ID   string
	Spec JobSpec
	// State as stored, except that a running job with a stale heartbeat reads
	// JobAbandoned.
	State     JobState
	Progress  JobProgress
	Instance  string // the runner's instance ("" while queued)
	Claims    int    // how many times a runner took it (more than 1: resumed)
	Created   int64  // unix ms
	Updated   int64
	Heartbeat int64
}

// BatchItem is one message of a batch: its id and the score the job saw it at (due
// time, lease deadline or time dead-lettered).
type BatchItem struct {
	ID    string
	Score int64
}

// BatchResult is what happened to one item: Prior is the state it was found in (the
// change was made when it is the state the operation works on, see each method), Route
// its route, Err a per-message failure (an envelope that cannot be re-encoded).
type BatchResult struct {
	Prior State
	Route string
	Err   error
}

// RescheduleItem is a pending message to move: from the due time it was seen at to Due.
type RescheduleItem struct {
	BatchItem
	Due int64
}
