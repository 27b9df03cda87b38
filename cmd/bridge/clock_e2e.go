//go:build e2eclock

package main

import (
	"os"
	"strings"
	"sync"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

// processClock, in a binary built with -tags e2eclock only (the end-to-end clock-skew
// test, e2e TestClockAheadOfRedisFiresNothingEarly), is the real clock shifted by the
// duration written in the file DELAYBRIDGE_TEST_CLOCK_FILE names ("5s", "-5s", "0s"),
// read again at most every 50 ms; the real clock without the variable.
func processClock() clock.Clock {
	if path := os.Getenv("DELAYBRIDGE_TEST_CLOCK_FILE"); path != "" {
		return &fileSkewClock{path: path}
	}
	return clock.Real{}
}

type fileSkewClock struct {
	path string
	mu   sync.Mutex
	off  time.Duration
	read time.Time
}

func (c *fileSkewClock) Now() time.Time { return time.Now().Add(c.offset()) }

func (c *fileSkewClock) NewTimer(d time.Duration) clock.Timer { return clock.Real{}.NewTimer(d) }

func (c *fileSkewClock) offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.read) >= 50*time.Millisecond {
		c.read = time.Now()
		if b, err := os.ReadFile(c.path); err == nil {
			if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
				c.off = d
			}
		}
	}
	return c.off
}
