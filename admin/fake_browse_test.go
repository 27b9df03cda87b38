package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Browsing and jobs of fakeBackend: an in-memory model of the documented semantics
// (filters, order, cursor, dry run, job progress) so the HTTP layer and the console
// are tested against the contract; storage is tested in store/redisstore.

func knownRoute(r string) bool { return r == "orders" || r == "billing" }

// orderKey is the position of m in a browse: due time, or dead time for dead letters.
func orderKey(m *Message) int64 {
	if m.State == StateDead {
		return m.DeadAt
	}
	return m.DueAt
}

func matches(m *Message, flt Filter) bool {
	return m.State == flt.State &&
		(flt.Route == "" || m.Route == flt.Route) &&
		(flt.DueFrom == 0 || m.DueAt >= flt.DueFrom) &&
		(flt.DueTo == 0 || m.DueAt < flt.DueTo) &&
		strings.HasPrefix(m.ID, flt.IDPrefix) &&
		bytes.HasPrefix(m.RawKey, []byte(flt.KeyPrefix))
}

// matching returns the messages flt matches, in browse order. f.mu must be held.
func (f *fakeBackend) matching(flt Filter) ([]*Message, error) {
	if flt.Route != "" && !knownRoute(flt.Route) {
		return nil, Invalid("route", "no route named %q", flt.Route)
	}
	var out []*Message
	for _, m := range f.msgs {
		if matches(m, flt) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if ki, kj := orderKey(out[i]), orderKey(out[j]); ki != kj {
			return ki < kj
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func fakeCursor(m *Message) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d|%s", orderKey(m), m.ID))
}

func parseFakeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", Invalid("cursor", "not a cursor this bridge issued")
	}
	k, id, ok := strings.Cut(string(b), "|")
	n, err := strconv.ParseInt(k, 10, 64)
	if !ok || err != nil {
		return 0, "", Invalid("cursor", "not a cursor this bridge issued")
	}
	return n, id, nil
}

func (f *fakeBackend) Browse(_ context.Context, q Query) (Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Page{}, f.failWith
	}
	f.lastLim, f.lastQuery = q.Limit, q
	all, err := f.matching(q.Filter)
	if err != nil {
		return Page{}, err
	}
	if q.Cursor != "" {
		k, id, err := parseFakeCursor(q.Cursor)
		if err != nil {
			return Page{}, err
		}
		i := sort.Search(len(all), func(i int) bool {
			ok := orderKey(all[i])
			return ok > k || ok == k && all[i].ID > id
		})
		all = all[i:]
	}
	var p Page
	for i, m := range all {
		if i == q.Limit {
			p.NextCursor = fakeCursor(all[i-1])
			break
		}
		c := *m
		c.RawPayload = nil
		p.Messages = append(p.Messages, c)
	}
	return p, nil
}

func (f *fakeBackend) PreviewJob(_ context.Context, spec JobSpec, sample int) (JobPreview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return JobPreview{}, f.failWith
	}
	all, err := f.matching(spec.Filter)
	if err != nil {
		return JobPreview{}, err
	}
	p := JobPreview{Matched: int64(len(all)), Exact: true}
	for _, m := range all[:min(sample, len(all))] {
		p.Sample = append(p.Sample, *m)
	}
	return p, nil
}

// StartJob applies the job at once (the fake has no background runner) and records it
// as done, so GET /v1/jobs/{id} shows the outcome.
func (f *fakeBackend) StartJob(_ context.Context, spec JobSpec) (Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Job{}, f.failWith
	}
	all, err := f.matching(spec.Filter)
	if err != nil {
		return Job{}, err
	}
	f.seq++
	now := f.now.UnixMilli()
	job := Job{ID: fmt.Sprintf("job-%d", f.seq), Spec: spec, State: JobQueued, CreatedAt: now, UpdatedAt: now, Instance: "a-1"}
	created := job
	for _, m := range all {
		job.Matched++
		switch spec.Kind {
		case JobCancel:
			f.msgs[m.ID] = &Message{ID: m.ID, State: StateCancelled}
		case JobReschedule:
			if spec.DeliverAt != 0 {
				m.DueAt = spec.DeliverAt
			} else {
				m.DueAt += spec.ShiftMs
			}
		case JobRequeueDead:
			m.State, m.DueAt, m.Attempt, m.Reason, m.DeadAt = StatePending, now, 0, "", 0
		case JobPurgeDead:
			delete(f.msgs, m.ID)
		}
		job.Done++
	}
	job.State = JobDone
	f.jobs[job.ID] = &job
	f.jobOrder = append(f.jobOrder, job.ID)
	return created, nil
}

func (f *fakeBackend) GetJob(_ context.Context, id string) (Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Job{}, f.failWith
	}
	j, ok := f.jobs[id]
	if !ok {
		return Job{}, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	return *j, nil
}

func (f *fakeBackend) ListJobs(_ context.Context, limit int) ([]Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return nil, f.failWith
	}
	f.lastLim = limit
	var out []Job
	for i := len(f.jobOrder) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, *f.jobs[f.jobOrder[i]])
	}
	return out, nil
}
