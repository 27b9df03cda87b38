package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Bulk job records (docs/CONTRACT.md §3 and §6): what a job does, its state and its
// progress, in Redis so that any instance answers for any job. The runner that executes
// them is jobs; the by-id batch operations it applies are in jobs_batch.go.
//
//	P:{C}:job:<id>       HASH  the job (fields below); expires JobRetention after it ends
//	P:{C}:jobs           ZSET  id -> created (unix ms), newest listed first; trimmed
//	                           to JobRetention on every create
//	P:{C}:jobs:active    SET   ids of queued and running jobs (what runners poll)

func (s *Store) jobKey(id string) string {
	return fmt.Sprintf("%s:{%s}:job:%s", s.opt.Prefix, s.opt.Cluster, id)
}
func (s *Store) jobsKey() string { return fmt.Sprintf("%s:{%s}:jobs", s.opt.Prefix, s.opt.Cluster) }
func (s *Store) activeKey() string {
	return fmt.Sprintf("%s:{%s}:jobs:active", s.opt.Prefix, s.opt.Cluster)
}

var (
	jobClaimScript  = newScript("job_claim", "job_claim")
	jobSaveScript   = newScript("job_save", "job_save")
	jobCancelScript = newScript("job_cancel", "job_cancel")
)

// CreateJob validates spec and records a queued job; a runner (any instance) picks it
// up. Jobs older than JobRetention leave the listing on the way.
func (s *Store) CreateJob(ctx context.Context, spec JobSpec, now int64) (Job, error) {
	if err := spec.Validate(); err != nil {
		return Job{}, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return Job{}, fmt.Errorf("scheduler: encode job: %w", err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	id := strconv.FormatInt(now, 36) + "-" + hex.EncodeToString(r[:])
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, s.jobKey(id), "kind", string(spec.Kind), "spec", string(raw), "state", string(JobQueued),
		"created", now, "updated", now, "heartbeat", 0, "matched", 0, "done", 0, "skipped", 0, "failed", 0)
	pipe.ZAdd(ctx, s.jobsKey(), redis.Z{Score: float64(now), Member: id})
	pipe.SAdd(ctx, s.activeKey(), id)
	pipe.ZRemRangeByScore(ctx, s.jobsKey(), "-inf", "("+strconv.FormatInt(now-JobRetention.Milliseconds(), 10))
	if _, err := pipe.Exec(ctx); err != nil {
		return Job{}, fmt.Errorf("scheduler: create job: %w", redisErr(err))
	}
	return Job{ID: id, Spec: spec, State: JobQueued, Created: now, Updated: now}, nil
}

// GetJob reads a job. now decides whether a running job reads JobAbandoned.
func (s *Store) GetJob(ctx context.Context, id string, now int64) (Job, error) {
	m, err := s.rdb.HGetAll(ctx, s.jobKey(id)).Result()
	if err != nil {
		return Job{}, fmt.Errorf("scheduler: get job %q: %w", id, redisErr(err))
	}
	if len(m) == 0 {
		return Job{}, fmt.Errorf("%w: %q", ErrJobNotFound, id)
	}
	return parseJob(id, m, now)
}

func parseJob(id string, m map[string]string, now int64) (Job, error) {
	j := Job{ID: id, State: JobState(m["state"]), Instance: m["instance"]}
	if err := json.Unmarshal([]byte(m["spec"]), &j.Spec); err != nil {
		return Job{}, fmt.Errorf("scheduler: job %q: spec: %w", id, err)
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	j.Created, j.Updated, j.Heartbeat, j.Claims = num("created"), num("updated"), num("heartbeat"), int(num("claims"))
	p := &j.Progress
	p.Matched, p.Done, p.Skipped, p.Failed = num("matched"), num("done"), num("skipped"), num("failed")
	p.Cursor, p.LastError, p.Exact = m["cursor"], m["error"], m["exact"] == "1"
	if v := m["sample"]; v != "" {
		if err := json.Unmarshal([]byte(v), &p.Sample); err != nil {
			return Job{}, fmt.Errorf("scheduler: job %q: sample: %w", id, err)
		}
	}
	if j.State == JobRunning && j.Heartbeat < now-JobStaleAfter.Milliseconds() {
		j.State = JobAbandoned
	}
	return j, nil
}

// ListJobs returns up to limit jobs, newest first.
func (s *Store) ListJobs(ctx context.Context, limit int, now int64) ([]Job, error) {
	if limit <= 0 {
		return nil, nil
	}
	ids, err := s.rdb.ZRevRange(ctx, s.jobsKey(), 0, int64(limit-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("scheduler: list jobs: %w", redisErr(err))
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	key := func(i int) string { return s.jobKey(ids[i]) }
	if err := s.pipelined(ctx, "list jobs", len(ids), key, func(pipe redis.Pipeliner, i int) {
		cmds[i] = pipe.HGetAll(ctx, key(i))
	}); err != nil && len(ids) > 0 {
		return nil, fmt.Errorf("scheduler: list jobs: %w", redisErr(err))
	}
	out := make([]Job, 0, len(ids))
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue // expired
		}
		j, err := parseJob(ids[i], c.Val(), now)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// ActiveJobs lists the ids of queued and running jobs (what runners poll).
func (s *Store) ActiveJobs(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.activeKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("scheduler: active jobs: %w", redisErr(err))
	}
	return ids, nil
}

// ClaimJob makes instance the runner of a queued job, or of an abandoned one (its
// heartbeat older than JobStaleAfter), and returns the job; ok is false when someone
// else runs it or it has finished.
func (s *Store) ClaimJob(ctx context.Context, id, instance string, now int64) (Job, bool, error) {
	stale := now - JobStaleAfter.Milliseconds()
	n, err := s.eval(ctx, jobClaimScript, []string{s.jobKey(id), s.activeKey()}, id, instance, now, stale).Int64()
	if err != nil {
		return Job{}, false, fmt.Errorf("scheduler: claim job %q: %w", id, err)
	}
	if n != 1 {
		return Job{}, false, nil
	}
	j, err := s.GetJob(ctx, id, now)
	return j, err == nil, err
}

// SaveJob records a running job's progress and heartbeat; with final set (JobDone,
// JobFailed) it also ends the job. It fails with ErrJobLost when instance no longer
// runs the job; nothing is written then.
func (s *Store) SaveJob(ctx context.Context, id, instance string, p JobProgress, final JobState, now int64) error {
	args := []any{id, instance, now, string(final), JobRetention.Milliseconds(),
		"matched", p.Matched, "done", p.Done, "skipped", p.Skipped, "failed", p.Failed,
		"cursor", p.Cursor, "error", p.LastError}
	if p.Exact {
		args = append(args, "exact", "1")
	}
	if len(p.Sample) > 0 {
		raw, err := json.Marshal(p.Sample)
		if err != nil {
			return fmt.Errorf("scheduler: encode job sample: %w", err)
		}
		args = append(args, "sample", string(raw))
	}
	v, err := s.eval(ctx, jobSaveScript, []string{s.jobKey(id), s.activeKey()}, args...).Text()
	if err != nil {
		return fmt.Errorf("scheduler: save job %q: %w", id, err)
	}
	if v != "ok" {
		return fmt.Errorf("%w: job %q is %q", ErrJobLost, id, v)
	}
	return nil
}

// CancelJob stops a queued or running job (its runner stops at its next batch; what it
// did stays done) and returns the state it was in; a finished job is left as it is.
func (s *Store) CancelJob(ctx context.Context, id string, now int64) (JobState, error) {
	v, err := s.eval(ctx, jobCancelScript, []string{s.jobKey(id), s.activeKey()}, id, now, JobRetention.Milliseconds()).Text()
	if err != nil {
		return "", fmt.Errorf("scheduler: cancel job %q: %w", id, err)
	}
	if v == "" {
		return "", fmt.Errorf("%w: %q", ErrJobNotFound, id)
	}
	return JobState(v), nil
}
