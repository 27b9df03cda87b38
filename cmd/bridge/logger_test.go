package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/config"
)

// Durations in log lines read as text ("1.5s") in both formats; JSON stays JSON.
func TestLoggerWritesDurationsAsText(t *testing.T) {
	var jb bytes.Buffer
	newLogger(config.LogConfig{Level: "info", Format: "json"}, &jb).Info("waited", "backoff", 1500*time.Millisecond, "n", 3)
	var line map[string]any
	if err := json.Unmarshal(jb.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %v: %s", err, jb.String())
	}
	if line["backoff"] != "1.5s" || line["n"] != float64(3) {
		t.Fatalf("json line = %s, want backoff \"1.5s\" and n 3", jb.String())
	}
	var tb bytes.Buffer
	newLogger(config.LogConfig{Level: "info", Format: "text"}, &tb).Info("waited", "backoff", 2*time.Minute)
	if !strings.Contains(tb.String(), "backoff=2m0s") {
		t.Fatalf("text line = %q, want backoff=2m0s", tb.String())
	}
}
