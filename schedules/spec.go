// Package schedules is the model of recurring schedules (docs/CONTRACT.md "Recurring
// schedules"): a definition (route, payload, spec, start, end, jitter, catch-up), its
// slots, the deterministic occurrence ids, and the Planner that parks the occurrences
// of the schedules this instance owns as ordinary messages ahead of their time.
package schedules

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest @every interval.
const MinEvery = time.Second

// Spec is a parsed slot specification: one of a cron expression (5 fields, or 6 with
// seconds first, or a descriptor such as @daily; time zone by a CRON_TZ=<zone> prefix,
// UTC by default), @every <duration> (slots at start + k·duration, start defaulting to
// the Unix epoch, so `@every 1h` is on the hour UTC), or @at <instant>[,<instant>…]
// (RFC 3339 instants).
type Spec struct {
	text   string
	cron   cron.Schedule
	every  time.Duration
	at     []time.Time
	anchor time.Time // @every's origin
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSpec parses text; anchor is @every's origin (the schedule's start, or zero for
// the Unix epoch).
func ParseSpec(text string, anchor time.Time) (Spec, error) {
	text = strings.TrimSpace(text)
	sp := Spec{text: text}
	switch {
	case text == "":
		return sp, errors.New("empty spec")
	case strings.HasPrefix(text, "@every "):
		// Not cron's own @every: it counts from whenever it is asked, so two
		// instances would compute different slots; ours are anchored.
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(text, "@every ")))
		if err != nil {
			return sp, fmt.Errorf("@every: %w", err)
		}
		if d < MinEvery || d%time.Millisecond != 0 {
			return sp, fmt.Errorf("@every %s: the interval must be at least %s, in whole milliseconds", d, MinEvery)
		}
		sp.every, sp.anchor = d, anchor
		if anchor.IsZero() {
			sp.anchor = time.UnixMilli(0)
		}
	case strings.HasPrefix(text, "@at "):
		for _, f := range strings.FieldsFunc(strings.TrimPrefix(text, "@at "), func(r rune) bool { return r == ',' || r == ' ' }) {
			t, err := time.Parse(time.RFC3339Nano, f)
			if err != nil {
				return sp, fmt.Errorf("@at: %w", err)
			}
			sp.at = append(sp.at, t.Truncate(time.Millisecond))
		}
		if len(sp.at) == 0 {
			return sp, errors.New("@at: no instant")
		}
		sort.Slice(sp.at, func(i, j int) bool { return sp.at[i].Before(sp.at[j]) })
	default:
		c, err := cronParser.Parse(text)
		if err != nil {
			return sp, fmt.Errorf("cron: %w", err)
		}
		sp.cron = c
	}
	return sp, nil
}

// String is the spec as written.
func (s Spec) String() string { return s.text }

// Next returns the first slot strictly after t; ok is false when there is none.
func (s Spec) Next(t time.Time) (time.Time, bool) {
	switch {
	case s.every > 0:
		if t.Before(s.anchor) {
			return s.anchor, true
		}
		k := t.Sub(s.anchor)/s.every + 1
		return s.anchor.Add(k * s.every), true
	case s.at != nil:
		i := sort.Search(len(s.at), func(i int) bool { return s.at[i].After(t) })
		if i == len(s.at) {
			return time.Time{}, false
		}
		return s.at[i], true
	case s.cron != nil:
		n := s.cron.Next(t)
		return n, !n.IsZero()
	}
	return time.Time{}, false
}
