package main

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// goMemLimitRatio is the share of the container's memory limit given to the Go runtime
// as its soft memory limit: the rest is headroom for memory the collector does not
// manage (thread stacks, the binary, cgo-free runtime structures) and for the moment
// between the heap reaching the limit and the collector catching up.
const goMemLimitRatio = 0.9

// setMemoryLimit gives the Go runtime a soft memory limit from the container's memory
// limit (cgroup v2 memory.max, or v1 memory.limit_in_bytes) when GOMEMLIMIT is not set:
// without one the collector lets the heap grow to twice what is live (GOGC=100), so a
// pod whose live heap is half its limit is killed by the kernel. GOMEMLIMIT set in the
// environment (the Helm charts set it from resources.limits.memory) wins. It logs the
// limit in force once.
func setMemoryLimit(log *slog.Logger) {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		log.Info("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v, "bytes", debug.SetMemoryLimit(-1))
		return
	}
	limit, err := memlimit.Set(memlimit.WithRatio(goMemLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
	switch {
	case err != nil:
		log.Debug("no container memory limit found; Go memory limit not set", "err", err)
	case limit == math.MaxInt64:
		log.Debug("the container has no memory limit; Go memory limit not set")
	default:
		log.Info("Go memory limit set from the container's memory limit", "bytes", limit, "ratio", goMemLimitRatio)
	}
}
