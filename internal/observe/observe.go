// Package observe is the narrow interface through which core packages report what they
// do. Core packages never import Prometheus; admin/metrics.go implements Observer with
// client_golang, and tests use Nop or their own recorder.
package observe

import "time"

// Observer receives events. Every method must be cheap and safe for concurrent use; it is
// called on hot paths (per batch where a count is passed, per message for histograms).
type Observer interface {
	// Received counts records consumed from a delay source (before parsing).
	Received(route string, n int)
	// Parked counts messages newly stored in Redis (duplicates excluded).
	Parked(route string, n int)
	// Invalid counts one invalid record by reason (bad_delay, payload_too_large, ...).
	Invalid(route, reason string)
	// RequestedDelay records the delay a producer asked for (due - receive time).
	RequestedDelay(route string, d time.Duration)
	// Fired records one message handed to egress by the wheel, with its lateness
	// (fire time - due time; negative would mean early).
	Fired(route string, lateness time.Duration)
	// Published counts messages the broker confirmed, with the batch's publish duration.
	Published(route, broker string, n int, took time.Duration)
	// DeadLettered counts messages moved to the dead letters.
	DeadLettered(route string, n int)
	// ScriptDuration records one Redis script call.
	ScriptDuration(script string, took time.Duration)
	// ShardsOwned sets the number of shards this instance owns.
	ShardsOwned(n int)
}

// Nop discards everything.
type Nop struct{}

func (Nop) Received(string, int)                         {}
func (Nop) Parked(string, int)                           {}
func (Nop) Invalid(string, string)                       {}
func (Nop) RequestedDelay(string, time.Duration)         {}
func (Nop) Fired(string, time.Duration)                  {}
func (Nop) Published(string, string, int, time.Duration) {}
func (Nop) DeadLettered(string, int)                     {}
func (Nop) ScriptDuration(string, time.Duration)         {}
func (Nop) ShardsOwned(int)                              {}
