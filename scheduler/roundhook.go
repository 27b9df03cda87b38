package scheduler

import "context"

// roundHook runs Options.OnOwnershipRound after a round, on its own goroutine, so that
// a slow Redis answering the hook's calls never delays the next round's lease renewals.
// A round that ends while the previous call still runs starts none. The ownership loop
// owns it and waits for the last call when it stops.
type roundHook struct {
	done chan struct{} // closed when the running call returned; nil before the first
}

func (h *roundHook) start(ctx context.Context, fn func(context.Context)) {
	if fn == nil || ctx.Err() != nil {
		return
	}
	if h.done != nil {
		select {
		case <-h.done:
		default:
			return // still running
		}
	}
	done := make(chan struct{})
	h.done = done
	go func() {
		defer close(done)
		fn(ctx)
	}()
}

// wait returns when no call runs (the loop's context has ended, which ends the call).
func (h *roundHook) wait() {
	if h.done != nil {
		<-h.done
	}
}
