package app

import (
	"context"
	"fmt"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/scheduler/store"
)

// Browsing and bulk jobs (admin.Backend, docs/CONTRACT.md §6). What the store cannot do
// yet is refused — a filter it cannot apply with admin.Invalid naming it (400), a whole
// operation with admin.ErrNotImplemented (501) — so nothing silently succeeds or
// silently ignores a filter. Still to build in the store: bounded per-shard range reads
// for browse with a cursor, filtered purges, and jobs with their state in Redis.

// Browse implements admin.Backend. Today: the first page of the dead letters, unfiltered
// (the store's ListDead); pending and in-flight browsing is not built yet.
func (b *Bridge) Browse(ctx context.Context, q admin.Query) (admin.Page, error) {
	if q.Filter.State != admin.StateDead {
		return admin.Page{}, fmt.Errorf("%w: browsing %s messages needs the store's range reads, not built yet", admin.ErrNotImplemented, q.Filter.State)
	}
	if err := unfilteredDead(q.Filter, "filtering dead letters"); err != nil {
		return admin.Page{}, err
	}
	if q.Cursor != "" {
		return admin.Page{}, admin.Invalid("cursor", "this bridge does not page dead letters yet (it issued no cursor)")
	}
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.Page{}, err
	}
	envs, err := shardStore.ListDead(ctx, q.Limit)
	if err != nil {
		return admin.Page{}, storeErr(err)
	}
	out := admin.Page{Messages: make([]admin.Message, 0, len(envs))}
	for _, env := range envs {
		out.Messages = append(out.Messages, messageOf(env, store.StateDead))
	}
	return out, nil
}

// unfilteredDead refuses every filter field but the state, naming the first one set.
func unfilteredDead(f admin.Filter, what string) error {
	for _, c := range []struct {
		field string
		set   bool
	}{
		{"route", f.Route != ""}, {"due_from", f.DueFrom != 0}, {"due_to", f.DueTo != 0},
		{"id_prefix", f.IDPrefix != ""}, {"key_prefix", f.KeyPrefix != ""},
	} {
		if c.set {
			return admin.Invalid(c.field, "%s by %s is not supported by this bridge yet", what, c.field)
		}
	}
	return nil
}

// PurgeDead implements admin.Backend: every dead letter (a route filter is refused).
func (b *Bridge) PurgeDead(ctx context.Context, f admin.Filter) (int64, error) {
	if err := unfilteredDead(f, "purging dead letters"); err != nil {
		return 0, err
	}
	shardStore, _, err := b.parts()
	if err != nil {
		return 0, err
	}
	n, err := shardStore.PurgeDead(ctx)
	return n, storeErr(err)
}

func jobsNotBuilt() error {
	return fmt.Errorf("%w: bulk jobs need job state in Redis, not built yet", admin.ErrNotImplemented)
}

// PreviewJob implements admin.Backend (not built yet: 501).
func (b *Bridge) PreviewJob(context.Context, admin.JobSpec, int) (admin.JobPreview, error) {
	return admin.JobPreview{}, jobsNotBuilt()
}

// StartJob implements admin.Backend (not built yet: 501).
func (b *Bridge) StartJob(context.Context, admin.JobSpec) (admin.Job, error) {
	return admin.Job{}, jobsNotBuilt()
}

// GetJob implements admin.Backend (not built yet: 501).
func (b *Bridge) GetJob(context.Context, string) (admin.Job, error) {
	return admin.Job{}, jobsNotBuilt()
}

// ListJobs implements admin.Backend (not built yet: 501).
func (b *Bridge) ListJobs(context.Context, int) ([]admin.Job, error) {
	return nil, jobsNotBuilt()
}
