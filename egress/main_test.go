package egress

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks every test of package egress for leaked goroutines. It is the
// package's only TestMain: add new tests beside it, not another TestMain.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
