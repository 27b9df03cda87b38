package kafka

import (
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/ingress"
)

// Abandon makes s's Run return without releasing its partition leases, as a process
// killed with SIGKILL leaves them: they expire after the lease TTL.
func Abandon(s *Source) { s.abandon.Store(true) }

// BeforeCommit sets a hook called after the lease check and before each offset commit.
func BeforeCommit(s *Source, f func(partition int)) { s.beforeCommit = f }

// Holder is the name s holds its partition leases under.
func Holder(s *Source) string { return s.holder }

// Raw is what s hands the ingress for m, received at now.
func Raw(s *Source, m *kafka.Message, now time.Time) ingress.Raw { return s.raw(m, now) }

// Release is s.release: msgs goes back for the next fetch.
func Release(s *Source, msgs []kafka.Message) { s.release(msgs) }

// ReaderMinBytes is the MinBytes of the source's partition readers.
func ReaderMinBytes(s *Source) int { return s.readerConfig(0).MinBytes }
