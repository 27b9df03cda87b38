package memstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Bulk job records, as the Redis store keeps them (a record per job, a listing by
// creation time trimmed to JobRetention on every create, the set of active jobs). A
// finished record expires JobRetention later on Options.Clock, as Redis expires the
// key on its own clock.

type jobRecord struct {
	job     storeapi.Job // State as stored (never JobAbandoned)
	expires time.Time    // zero while queued or running
}

// record returns job id's record, nil when there is none or it expired.
func (s *Store) record(id string) *jobRecord {
	r, ok := s.jobs[id]
	if !ok {
		return nil
	}
	if !r.expires.IsZero() && !s.opt.Clock.Now().Before(r.expires) {
		delete(s.jobs, id)
		return nil
	}
	return r
}

// finish ends a job record: it leaves the active set and expires after JobRetention.
func (s *Store) finish(id string, r *jobRecord, state storeapi.JobState, now int64) {
	r.job.State, r.job.Updated = state, now
	r.expires = s.opt.Clock.Now().Add(storeapi.JobRetention)
	delete(s.active, id)
}

// read is the record as a caller sees it: a running job with a stale heartbeat reads
// JobAbandoned. Progress is copied, so a caller's change never reaches the store.
func read(r *jobRecord, now int64) storeapi.Job {
	j := r.job
	j.Progress.Sample = slices.Clone(j.Progress.Sample)
	if j.State == storeapi.JobRunning && j.Heartbeat < now-storeapi.JobStaleAfter.Milliseconds() {
		j.State = storeapi.JobAbandoned
	}
	return j
}

// CreateJob validates spec and records a queued job (see storeapi.Jobs.CreateJob).
func (s *Store) CreateJob(ctx context.Context, spec storeapi.JobSpec, now int64) (storeapi.Job, error) {
	if err := spec.Validate(); err != nil {
		return storeapi.Job{}, err
	}
	after, err := s.begin(ctx, OpJobs)
	if err != nil {
		return storeapi.Job{}, err
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	id := strconv.FormatInt(now, 36) + "-" + hex.EncodeToString(r[:])
	j := storeapi.Job{ID: id, Spec: spec, State: storeapi.JobQueued, Created: now, Updated: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs[id] = &jobRecord{job: j}
	s.listed[id] = now
	s.active[id] = true
	for old, created := range s.listed {
		if created < now-storeapi.JobRetention.Milliseconds() {
			delete(s.listed, old)
		}
	}
	return j, after
}

// GetJob reads a job; ErrJobNotFound when there is none.
func (s *Store) GetJob(ctx context.Context, id string, now int64) (storeapi.Job, error) {
	after, err := s.begin(ctx, OpJobs)
	if err != nil {
		return storeapi.Job{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record(id)
	if r == nil {
		return storeapi.Job{}, fmt.Errorf("%w: %q", storeapi.ErrJobNotFound, id)
	}
	return read(r, now), after
}

// ListJobs returns up to limit jobs, newest first (ties: id descending, as ZREVRANGE);
// a listed job whose record expired is left out.
func (s *Store) ListJobs(ctx context.Context, limit int, now int64) ([]storeapi.Job, error) {
	if limit <= 0 {
		return nil, nil
	}
	after, err := s.begin(ctx, OpJobs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]scored, 0, len(s.listed))
	for id, created := range s.listed {
		ids = append(ids, scored{id, created})
	}
	sortScored(ids)
	slices.Reverse(ids)
	out := []storeapi.Job{}
	for _, m := range ids[:min(limit, len(ids))] {
		if r := s.record(m.id); r != nil {
			out = append(out, read(r, now))
		}
	}
	return out, after
}

// ActiveJobs lists the ids of queued and running jobs, sorted.
func (s *Store) ActiveJobs(ctx context.Context) ([]string, error) {
	after, err := s.begin(ctx, OpJobs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.active))
	for id := range s.active {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, after
}

// ClaimJob makes instance the runner of a queued or abandoned job (see
// storeapi.Jobs.ClaimJob); a record that is gone or finished leaves the active set.
func (s *Store) ClaimJob(ctx context.Context, id, instance string, now int64) (storeapi.Job, bool, error) {
	after, err := s.begin(ctx, OpJobs)
	if err != nil {
		return storeapi.Job{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record(id)
	switch {
	case r == nil:
		delete(s.active, id)
		return storeapi.Job{}, false, after
	case r.job.State == storeapi.JobRunning:
		if r.job.Heartbeat >= now-storeapi.JobStaleAfter.Milliseconds() {
			return storeapi.Job{}, false, after
		}
	case r.job.State != storeapi.JobQueued:
		delete(s.active, id)
		return storeapi.Job{}, false, after
	}
	j := &r.job
	j.State, j.Instance, j.Heartbeat, j.Updated = storeapi.JobRunning, instance, now, now
	j.Claims++
	return read(r, now), after == nil, after
}

// SaveJob records a running job's progress (see storeapi.Jobs.SaveJob): Exact and
// Sample, once recorded, stay until a save sets them again; ErrJobLost when instance
// no longer runs the job.
func (s *Store) SaveJob(ctx context.Context, id, instance string, p storeapi.JobProgress, final storeapi.JobState, now int64) error {
	after, err := s.begin(ctx, OpJobs)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record(id)
	if r == nil || r.job.State != storeapi.JobRunning || r.job.Instance != instance {
		state := storeapi.JobState("")
		if r != nil {
			state = r.job.State
		}
		return fmt.Errorf("%w: job %q is %q", storeapi.ErrJobLost, id, state)
	}
	old := r.job.Progress
	r.job.Progress = p
	r.job.Progress.Exact = p.Exact || old.Exact
	r.job.Progress.Sample = slices.Clone(p.Sample)
	if len(p.Sample) == 0 {
		r.job.Progress.Sample = old.Sample
	}
	r.job.Heartbeat, r.job.Updated = now, now
	if final != "" {
		s.finish(id, r, final, now)
	}
	return after
}

// CancelJob stops a queued or running job and returns the state it was in; a finished
// job is left as it is; ErrJobNotFound when there is none.
func (s *Store) CancelJob(ctx context.Context, id string, now int64) (storeapi.JobState, error) {
	after, err := s.begin(ctx, OpJobs)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record(id)
	if r == nil {
		return "", fmt.Errorf("%w: %q", storeapi.ErrJobNotFound, id)
	}
	prior := r.job.State
	if prior == storeapi.JobQueued || prior == storeapi.JobRunning {
		s.finish(id, r, storeapi.JobCancelled, now)
	}
	return prior, after
}
