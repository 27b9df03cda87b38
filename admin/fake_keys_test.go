package admin

import (
	"context"
	"sort"
)

// The fake's ordered routes are "orders" and "billing": a key's messages are those of
// the route whose Kafka key is the key, pending or in flight, by due time then id; the
// first is the head.

func (f *fakeBackend) KeyMessages(_ context.Context, route, key string) (KeyList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keyList(route, key, false)
}

func (f *fakeBackend) CancelKey(_ context.Context, route, key string) (KeyList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keyList(route, key, true)
}

func (f *fakeBackend) keyList(route, key string, cancel bool) (KeyList, error) {
	if f.failWith != nil {
		return KeyList{}, f.failWith
	}
	if route != "orders" && route != "billing" {
		return KeyList{}, Invalid("route", "%q is not a route with order: key", route)
	}
	var ms []*Message
	for _, m := range f.msgs {
		if m.Route == route && string(m.RawKey) == key && (m.State == StatePending || m.State == StateInflight) {
			ms = append(ms, m)
		}
	}
	sort.Slice(ms, func(i, j int) bool {
		return ms[i].DueAt < ms[j].DueAt || ms[i].DueAt == ms[j].DueAt && ms[i].ID < ms[j].ID
	})
	out := KeyList{Route: route, Key: key}
	for i, m := range ms {
		c := *m
		c.RawPayload = nil
		out.Messages = append(out.Messages, c)
		if i == 0 {
			out.Head = m.ID
		}
		if cancel {
			m.State = StateCancelled
		}
	}
	return out, nil
}
