package scheduler_test

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Queued acknowledgements hold their credits, so the acker writes them without waiting
// for AckInterval once they hold a quarter of the credits: here 40 credits, an hour's
// interval, and a second batch of 20 queued acks (more than 10) is written at once.
// A batch under the share waits (TestCompleterBatchedAcks).
// The same for bytes: 40 messages' worth of byte budget (each message counts at least
// storeapi.MemOverhead), messages unbounded.
func TestAckerWritesWhenQueueHoldsShareOfCredits(t *testing.T) {
	t.Run("messages", func(t *testing.T) {
		testAckerShare(t, func(o *scheduler.Options) { o.MaxInMemory = 40 })
	})
	t.Run("bytes", func(t *testing.T) {
		testAckerShare(t, func(o *scheduler.Options) { o.MaxInMemoryBytes = 40 * storeapi.MemOverhead })
	})
}

func testAckerShare(t *testing.T, limit func(*scheduler.Options)) {
	w := newWorld(t, 2)
	opt := w.options("a")
	opt.AckInterval = time.Hour
	limit(&opt)
	w.start(opt, nil)
	delivered := func(msgs []string) func() bool {
		return func() bool {
			for _, id := range msgs {
				if st, _, _ := w.state(id); st != storeapi.StateDelivered {
					return false
				}
			}
			return true
		}
	}
	first := ids("first", 5)
	w.park(first, w.fc.Now().Add(time.Second))
	w.drive("first delivered", 10*time.Second, delivered(first)) // the first write goes at once
	second := ids("second", 20)
	w.park(second, w.fc.Now().Add(time.Second))
	w.drive("second delivered within the hour's interval", 10*time.Second, delivered(second))
}
