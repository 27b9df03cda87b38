package main

import (
	"strconv"
	"strings"
	"testing"
)

func TestScriptCallsPerMessage(t *testing.T) {
	scrape := func(park, ack int) map[string]float64 {
		text := `# TYPE delaybridge_redis_script_duration_seconds histogram
delaybridge_redis_script_duration_seconds_bucket{script="park",le="+Inf"} 99
delaybridge_redis_script_duration_seconds_count{script="park"} ` + itoa(park) + `
delaybridge_redis_script_duration_seconds_count{script="ack"} ` + itoa(ack) + `
delaybridge_publish_duration_seconds_count{route="a"} 7
`
		m, err := parseScriptCalls(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	got := callsPerMsg(scrape(10, 5), scrape(30, 5), 100)
	if len(got) != 1 || got["park"] != 0.2 {
		t.Fatalf("calls per message %v, want park 0.2 only (ack made no call in between)", got)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
