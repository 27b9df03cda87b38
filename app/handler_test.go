package app

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/delaybridge/delay-bridge/ingress"
)

// cloneItems copies items deeply enough to notice any change a handler makes to them
// or to the envelopes they point to.
func cloneItems(items []ingress.Item) []ingress.Item {
	out := make([]ingress.Item, len(items))
	for i, it := range items {
		out[i] = it
		if it.Env != nil {
			e := *it.Env
			e.Payload, e.Key = bytes.Clone(e.Payload), bytes.Clone(e.Key)
			e.Headers = slices.Clone(e.Headers)
			out[i].Env = &e
		}
	}
	return out
}

// TestHandlerDoesNotModifyItems: the ingress Handler contract — a batch handed again
// after a failure is the same items, so the handler must leave them (and their
// envelopes) as they were: valid, invalid-to-deliver (on_invalid: deliver, whose due
// time the handler sets on a copy), invalid-to-bury and cancel items, handled twice.
func TestHandlerDoesNotModifyItems(t *testing.T) {
	tb := startBridge(t, "routes.0.on_invalid=deliver")
	ctx := context.Background()
	batch := []ingress.Item{
		item(t, "a", "one", "x-message-id", "m-1", "x-delay", "3600000"),
		item(t, "a", "bad", "x-message-id", "m-bad-a", "x-delay", "soon"),
		item(t, "b", "bad", "x-message-id", "m-bad-b", "x-delay", "soon"),
		item(t, "b", "", "x-delay-cancel", "m-other"),
	}
	if batch[1].Invalid == "" || batch[2].Invalid == "" || batch[3].CancelID == "" {
		t.Fatalf("test batch not as intended: %+v", batch)
	}
	want := cloneItems(batch)
	for range 2 {
		if err := tb.handle(ctx, batch); err != nil {
			t.Fatal(err)
		}
		for i := range batch {
			if !reflect.DeepEqual(batch[i], want[i]) || (batch[i].Env != nil && !reflect.DeepEqual(*batch[i].Env, *want[i].Env)) {
				t.Fatalf("item %d modified by the handler:\n got %+v\nwant %+v", i, batch[i].Env, want[i].Env)
			}
		}
	}
}
