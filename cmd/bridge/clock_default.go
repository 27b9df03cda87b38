//go:build !e2eclock

package main

import "github.com/delaybridge/delay-bridge/internal/clock"

// processClock is the bridge's clock: the real one. (A binary built with -tags
// e2eclock has a clock a test can skew instead: clock_e2e.go.)
func processClock() clock.Clock { return clock.Real{} }
