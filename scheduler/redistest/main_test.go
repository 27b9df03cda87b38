// Package redistest runs the scheduler against a real redis-server (started per test
// through testkit) and the real egress dispatcher: ownership, failover,
// fencing, pumps and outcomes end to end. It holds only tests, so `go test ./scheduler`
// stays free of Redis; these are the real-server coverage next to the scheduler's own
// tests on store/memstore and the fake clock.
package redistest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
