package config

import (
	"fmt"
	"strings"
	"time"
)

// Schedule is one recurring schedule from the config file (`schedules:`; docs/CONTRACT.md
// "Recurring schedules"). The bridge reconciles them into the store at start (added,
// changed, removed); over the admin API they are read-only. The spec itself (cron with
// CRON_TZ=, @every <duration>, @at <instants>) is parsed by schedules when
// the bridge is built (app.New, check-config).
type Schedule struct {
	ID           string            `koanf:"id"`
	Route        string            `koanf:"route"`
	Target       string            `koanf:"target"` // on the route's allow-list; "" = the route's target
	Spec         string            `koanf:"spec"`
	Payload      string            `koanf:"payload"`
	Headers      map[string]string `koanf:"headers"`
	Key          string            `koanf:"key"`         // Kafka key
	RoutingKey   string            `koanf:"routing_key"` // AMQP routing key
	Start        string            `koanf:"start"`       // RFC 3339, optional
	End          string            `koanf:"end"`         // RFC 3339, optional
	Jitter       time.Duration     `koanf:"jitter"`
	CatchUp      string            `koanf:"catch_up"` // skip (default), one, all
	CatchUpLimit int               `koanf:"catch_up_limit"`
	Paused       bool              `koanf:"paused"`
}

// validateSchedules checks schedules[*] against each other and the routes.
func (c *Config) validateSchedules(p *problems) {
	seen := map[string]bool{}
	for i, s := range c.Schedules {
		key := fmt.Sprintf("schedules[%d]", i)
		switch {
		case s.ID == "":
			p.add(key+".id", "is required")
		case strings.ContainsAny(s.ID, "@/ \t\n"):
			p.add(key+".id", "must not contain '@', '/' or white space, got %q", s.ID)
		case seen[s.ID]:
			p.add(key+".id", "%q is used by an earlier schedule", s.ID)
		}
		seen[s.ID] = true
		if r := c.RouteByName(s.Route); r == nil {
			p.add(key+".route", "no route named %q", s.Route)
		}
		if strings.TrimSpace(s.Spec) == "" {
			p.add(key+".spec", "is required (cron, @every <duration> or @at <instants>)")
		}
		switch s.CatchUp {
		case "", "skip", "one", "all":
		default:
			p.add(key+".catch_up", "must be skip, one or all, got %q", s.CatchUp)
		}
		if s.Jitter < 0 || s.CatchUpLimit < 0 {
			p.add(key, "jitter and catch_up_limit must not be negative")
		}
		var start, end time.Time
		var err error
		if s.Start != "" {
			if start, err = time.Parse(time.RFC3339, s.Start); err != nil {
				p.add(key+".start", "must be an RFC 3339 time, got %q", s.Start)
			}
		}
		if s.End != "" {
			if end, err = time.Parse(time.RFC3339, s.End); err != nil {
				p.add(key+".end", "must be an RFC 3339 time, got %q", s.End)
			}
		}
		if !start.IsZero() && !end.IsZero() && !end.After(start) {
			p.add(key+".end", "must be after start")
		}
		if c.Limits.MaxPayloadBytes > 0 && len(s.Payload) > c.Limits.MaxPayloadBytes {
			p.add(key+".payload", "%d bytes, beyond limits.max_payload_bytes", len(s.Payload))
		}
	}
}
