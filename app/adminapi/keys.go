package adminapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Per-key order (admin.KeyBackend): what is pending for one key of a route with
// `order: key`, and cancelling it.

var _ admin.KeyBackend = (*Backend)(nil)

// orderedRoute refuses a route that is unknown or not ordered (Invalid "route").
func (b *Backend) orderedRoute(route string) error {
	for _, r := range b.cfg.Routes {
		if r.Name == route {
			if r.Order != config.OrderKey {
				return admin.Invalid("route", "route %q has no order: key (its messages are not kept by key)", route)
			}
			return nil
		}
	}
	return admin.Invalid("route", "no route named %q", route)
}

// KeyMessages implements admin.KeyBackend.
func (b *Backend) KeyMessages(ctx context.Context, route, key string) (admin.KeyList, error) {
	shardStore, _, err := b.parts()
	if err != nil {
		return admin.KeyList{}, err
	}
	if err := b.orderedRoute(route); err != nil {
		return admin.KeyList{}, err
	}
	msgs, err := shardStore.KeyMessages(ctx, route, key)
	if err != nil {
		return admin.KeyList{}, storeErr(err)
	}
	out := admin.KeyList{Route: route, Key: key}
	for _, m := range msgs {
		am := messageOf(m.Env, m.State)
		am.RawPayload = nil
		if m.State == storeapi.StatePending {
			am.DueAt = m.Score
		}
		if m.Head {
			out.Head = m.Env.ID
		}
		out.Messages = append(out.Messages, am)
	}
	return out, nil
}

// CancelKey implements admin.KeyBackend: it cancels each message KeyMessages lists
// (in flight: also dropped from the wheel that holds it, best effort) and returns those
// it cancelled, with the state each was in.
func (b *Backend) CancelKey(ctx context.Context, route, key string) (admin.KeyList, error) {
	list, err := b.KeyMessages(ctx, route, key)
	if err != nil {
		return admin.KeyList{}, err
	}
	_, sched, err := b.parts()
	if err != nil {
		return admin.KeyList{}, err
	}
	out := admin.KeyList{Route: route, Key: key}
	var errs []error
	for _, m := range list.Messages {
		prior, err := sched.Cancel(ctx, m.ID, storeapi.CancelOptions{Route: route})
		if err != nil {
			errs = append(errs, fmt.Errorf("cancel %q: %w", m.ID, storeErr(err)))
			continue
		}
		if prior == storeapi.StatePending || prior == storeapi.StateInflight || prior == storeapi.StateDead {
			m.State = string(prior)
			out.Messages = append(out.Messages, m)
			if m.ID == list.Head {
				out.Head = m.ID
			}
		}
	}
	if len(errs) > 0 {
		return out, errors.Join(errs...)
	}
	return out, nil
}
