package app

import (
	"context"

	"github.com/delaybridge/delay-bridge/jobs"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// newJobRunner builds the bulk job runner of this instance: in-flight cancels reach the
// wheel holding the message, reschedules and requeues wake the pumps.
func (b *Bridge) newJobRunner(shardStore storeapi.Store, sched interface {
	CancelLocal(id string) bool
	BroadcastCancel(ctx context.Context, id string) error
	Wake(ctx context.Context, minDue map[int]int64)
}) *jobs.Runner {
	return jobs.New(shardStore, jobs.Options{
		Instance: b.cfg.Instance, Clock: b.clk, Log: b.log, Observer: b.obs,
		OnInflightCancelled: func(ctx context.Context, ids []string) {
			for _, id := range ids {
				if !sched.CancelLocal(id) {
					if err := sched.BroadcastCancel(ctx, id); err != nil {
						b.log.Warn("broadcast cancel of an in-flight message", "id", id, "err", err)
					}
				}
			}
		},
		OnWake:      sched.Wake,
		OnCancelled: b.receipts.Cancelled,
	})
}
