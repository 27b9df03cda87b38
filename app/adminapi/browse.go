package adminapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/jobs"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Browsing and bulk jobs (admin.Backend, docs/CONTRACT.md §6): browse pages come from
// the store's Browse (bounded reads per shard, merged), jobs are recorded in Redis by
// the store and run by the jobs.Runner that Run starts with the bridge.

// previewMaxScan bounds what a dry run over a route, id or key filter examines within
// one request; beyond it the preview says its count is not exact.
const previewMaxScan = 200_000

// jobFilter turns an admin filter into the store's, checking the route.
func (b *Backend) jobFilter(f admin.Filter) (storeapi.JobFilter, error) {
	if f.Route != "" {
		if _, ok := b.rules[f.Route]; !ok {
			return storeapi.JobFilter{}, admin.Invalid("route", "no route named %q", f.Route)
		}
	}
	out := storeapi.JobFilter{State: storeapi.State(f.State), Route: f.Route, From: f.DueFrom, IDPrefix: f.IDPrefix, KeyPrefix: f.KeyPrefix}
	if f.DueTo != 0 {
		out.To = f.DueTo - 1 // admin's due_to is exclusive, the store's range inclusive
		if out.To < max(out.From, 1) {
			return storeapi.JobFilter{}, admin.Invalid("due_to", "due_to %d is not after due_from %d", f.DueTo, f.DueFrom)
		}
	}
	return out, nil
}

// browseMessage is messageOf for a browse item: the score is the due time (pending),
// the time dead-lettered (dead) or the lease deadline (inflight); no payload.
func browseMessage(it storeapi.BrowseItem, st storeapi.State) admin.Message {
	m := messageOf(it.Envelope, st)
	m.RawPayload = nil
	switch st {
	case storeapi.StatePending:
		m.DueAt = it.Score
	case storeapi.StateDead:
		m.DeadAt = it.Score
	}
	return m
}

// Browse implements admin.Backend.
func (b *Backend) Browse(ctx context.Context, q admin.Query) (admin.Page, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.Page{}, err
	}
	f, err := b.jobFilter(q.Filter)
	if err != nil {
		return admin.Page{}, err
	}
	bq := f.Query()
	bq.Limit, bq.Cursor = q.Limit, q.Cursor
	page, err := shardStore.Browse(ctx, bq)
	switch {
	case errors.Is(err, storeapi.ErrBadCursor):
		return admin.Page{}, admin.Invalid("cursor", "%v", err)
	case errors.Is(err, storeapi.ErrInvalid):
		return admin.Page{}, admin.Invalid("state", "%v", err)
	case err != nil:
		return admin.Page{}, storeErr(err)
	}
	out := admin.Page{Messages: make([]admin.Message, 0, len(page.Items)), NextCursor: page.Next}
	for _, it := range page.Items {
		out.Messages = append(out.Messages, browseMessage(it, bq.State))
	}
	return out, nil
}

// PurgeDead implements admin.Backend: every dead letter, or those of one route (browse
// pages of that route's dead letters, each purged by id).
func (b *Backend) PurgeDead(ctx context.Context, f admin.Filter) (int64, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return 0, err
	}
	if f.Route == "" {
		n, err := shardStore.PurgeDead(ctx)
		return n, storeErr(err)
	}
	jf, err := b.jobFilter(admin.Filter{Route: f.Route, State: admin.StateDead})
	if err != nil {
		return 0, err
	}
	q := jf.Query()
	q.Limit = storeapi.BrowseMaxLimit
	var total int64
	for {
		page, err := shardStore.Browse(ctx, q)
		if err != nil {
			return total, storeErr(err)
		}
		items := make([]storeapi.BatchItem, len(page.Items))
		for i, it := range page.Items {
			items[i] = storeapi.BatchItem{ID: it.Envelope.ID, Score: it.Score}
		}
		flags, err := shardStore.PurgeDeadBatch(ctx, items)
		if err != nil {
			return total, storeErr(err)
		}
		for _, ok := range flags {
			if ok {
				total++
			}
		}
		if page.Next == "" {
			return total, nil
		}
		q.Cursor = page.Next
	}
}

// jobSpec turns a validated admin job spec into the store's.
func (b *Backend) jobSpec(spec admin.JobSpec) (storeapi.JobSpec, error) {
	f, err := b.jobFilter(spec.Filter)
	if err != nil {
		return storeapi.JobSpec{}, err
	}
	out := storeapi.JobSpec{Kind: storeapi.JobKind(spec.Kind), Filter: f, DueAt: spec.DeliverAt, ShiftMs: spec.ShiftMs}
	if err := out.Validate(); err != nil {
		return storeapi.JobSpec{}, admin.Invalid("kind", "%v", err)
	}
	return out, nil
}

// PreviewJob implements admin.Backend: a dry run within the request (jobs.PreviewFilter).
func (b *Backend) PreviewJob(ctx context.Context, spec admin.JobSpec, sample int) (admin.JobPreview, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.JobPreview{}, err
	}
	js, err := b.jobSpec(spec)
	if err != nil {
		return admin.JobPreview{}, err
	}
	p, err := jobs.PreviewFilter(ctx, shardStore, js.Filter, sample, previewMaxScan)
	if err != nil {
		return admin.JobPreview{}, storeErr(err)
	}
	out := admin.JobPreview{DryRun: true, Spec: spec, Matched: p.Matched, Exact: p.Exact, Sample: make([]admin.Message, 0, len(p.Sample))}
	for _, it := range p.Sample {
		out.Sample = append(out.Sample, browseMessage(it, js.Filter.State))
	}
	return out, nil
}

// StartJob implements admin.Backend: the job is recorded queued and this instance's
// runner is told to look at once (any instance's runner may take it).
func (b *Backend) StartJob(ctx context.Context, spec admin.JobSpec) (admin.Job, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.Job{}, err
	}
	js, err := b.jobSpec(spec)
	if err != nil {
		return admin.Job{}, err
	}
	j, err := shardStore.CreateJob(ctx, js, clock.NowMs(b.clk))
	if err != nil {
		return admin.Job{}, storeErr(err)
	}
	if runner := b.runtime().Jobs; runner != nil {
		runner.Kick()
	}
	return jobOf(j), nil
}

// GetJob implements admin.Backend.
func (b *Backend) GetJob(ctx context.Context, id string) (admin.Job, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.Job{}, err
	}
	j, err := shardStore.GetJob(ctx, id, clock.NowMs(b.clk))
	if errors.Is(err, storeapi.ErrJobNotFound) {
		return admin.Job{}, fmt.Errorf("%w: no job %q", admin.ErrNotFound, id)
	}
	if err != nil {
		return admin.Job{}, storeErr(err)
	}
	return jobOf(j), nil
}

// ListJobs implements admin.Backend.
func (b *Backend) ListJobs(ctx context.Context, limit int) ([]admin.Job, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return nil, err
	}
	js, err := shardStore.ListJobs(ctx, limit, clock.NowMs(b.clk))
	if err != nil {
		return nil, storeErr(err)
	}
	out := make([]admin.Job, len(js))
	for i, j := range js {
		out[i] = jobOf(j)
	}
	return out, nil
}

// jobOf is a job as the admin API shows it: messages left alone because they changed
// state before the job reached them count as failed, with a sentence saying so.
func jobOf(j storeapi.Job) admin.Job {
	p := j.Progress
	out := admin.Job{
		ID: j.ID, State: string(j.State), Matched: p.Matched, Done: p.Done, Failed: p.Failed + p.Skipped,
		CreatedAt: j.Created, UpdatedAt: j.Updated, Instance: j.Instance,
		Spec: admin.JobSpec{Kind: string(j.Spec.Kind), DeliverAt: j.Spec.DueAt, ShiftMs: j.Spec.ShiftMs, Filter: admin.Filter{
			Route: j.Spec.Filter.Route, State: string(j.Spec.Filter.State), DueFrom: j.Spec.Filter.From,
			IDPrefix: j.Spec.Filter.IDPrefix, KeyPrefix: j.Spec.Filter.KeyPrefix,
		}},
	}
	if j.Spec.Filter.To != 0 {
		out.Spec.Filter.DueTo = j.Spec.Filter.To + 1
	}
	if j.State == storeapi.JobCancelled {
		out.State = admin.JobFailed
		out.Errors = append(out.Errors, "cancelled by an operator")
	}
	if p.Skipped > 0 {
		out.Errors = append(out.Errors, fmt.Sprintf("%d messages changed state before the job reached them (fired, cancelled, moved): left alone", p.Skipped))
	}
	if p.LastError != "" {
		out.Errors = append(out.Errors, p.LastError)
	}
	return out
}
