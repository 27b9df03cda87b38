package schedules

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Catch-up policies: what happens to slots that passed while no bridge planned them.
const (
	CatchUpSkip = "skip" // none of them is published (each counted missed)
	CatchUpOne  = "one"  // the latest is published at once, the others counted missed
	CatchUpAll  = "all"  // the latest CatchUpLimit are published at once, in slot order
)

// DefaultCatchUpLimit bounds catch_up: all when the definition gives no limit.
const DefaultCatchUpLimit = 100

// Origins of a definition.
const (
	OriginAPI    = "api"    // created over HTTP or with bridge ctl
	OriginConfig = "config" // from the config file's schedules: (read-only over HTTP)
)

// Definition is one recurring schedule as stored (JSON) and shown by the API.
type Definition struct {
	ID           string            `json:"id"`
	Route        string            `json:"route"`
	Target       string            `json:"target,omitempty"` // a target on the route's allow-list; "" = the route's
	Spec         string            `json:"spec"`
	Payload      string            `json:"payload,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
	Key          string            `json:"key,omitempty"`         // Kafka key
	RoutingKey   string            `json:"routing_key,omitempty"` // AMQP routing key
	Start        time.Time         `json:"start,omitempty"`
	End          time.Time         `json:"end,omitempty"`
	JitterMs     int64             `json:"jitter_ms,omitempty"`
	CatchUp      string            `json:"catch_up,omitempty"` // skip (default), one, all
	CatchUpLimit int               `json:"catch_up_limit,omitempty"`
	Paused       bool              `json:"paused,omitempty"`
	Origin       string            `json:"origin,omitempty"` // api (default) or config
}

// MaxIDBytes bounds a schedule id (its occurrence ids add '@', 13 digits and a
// generation).
const MaxIDBytes = 200

// Validate checks the definition on its own (the route's existence is the caller's:
// a schedule whose route is gone is kept and reported, not refused) and returns its
// parsed spec. Errors name the field first ("spec: ...").
func (d *Definition) Validate() (Spec, error) {
	switch {
	case d.ID == "":
		return Spec{}, errors.New("id: required")
	case len(d.ID) > MaxIDBytes:
		return Spec{}, fmt.Errorf("id: longer than %d bytes", MaxIDBytes)
	case strings.ContainsAny(d.ID, "@/ \t\n"):
		return Spec{}, errors.New("id: must not contain '@', '/' or white space")
	case d.Route == "":
		return Spec{}, errors.New("route: required")
	case d.JitterMs < 0:
		return Spec{}, errors.New("jitter: must not be negative")
	case d.CatchUpLimit < 0:
		return Spec{}, errors.New("catch_up_limit: must not be negative")
	case !d.Start.IsZero() && !d.End.IsZero() && !d.End.After(d.Start):
		return Spec{}, errors.New("end: must be after start")
	}
	switch d.CatchUp {
	case "", CatchUpSkip, CatchUpOne, CatchUpAll:
	default:
		return Spec{}, fmt.Errorf("catch_up: %q is none of skip, one, all", d.CatchUp)
	}
	sp, err := ParseSpec(d.Spec, d.Start)
	if err != nil {
		return Spec{}, fmt.Errorf("spec: %w", err)
	}
	return sp, nil
}

// Normalize fills the defaults in (catch_up skip, origin api).
func (d *Definition) Normalize() {
	if d.CatchUp == "" {
		d.CatchUp = CatchUpSkip
	}
	if d.Origin == "" {
		d.Origin = OriginAPI
	}
}

// catchUpLimit is how many missed slots catch_up: all publishes.
func (d *Definition) catchUpLimit() int {
	if d.CatchUpLimit > 0 {
		return d.CatchUpLimit
	}
	return DefaultCatchUpLimit
}

// Encode is the stored form.
func (d *Definition) Encode() ([]byte, error) { return json.Marshal(d) }

// Decode reads a stored definition.
func Decode(b []byte) (Definition, error) {
	var d Definition
	err := json.Unmarshal(b, &d)
	return d, err
}

// Same reports whether two definitions would plan the same occurrences (config
// reconciliation: an unchanged definition is not written again, so its generation
// and planned slots stay).
func Same(a, b Definition) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// OccurrenceID is the message id of the slot at slot (unix ms) of generation gen:
// "<id>@<slot>" for a schedule's first generation, "<id>@<slot>~<gen>" after an edit.
// Deterministic, so parking a slot twice (two planners during a failover, a retried
// round) is refused as a duplicate; the generation is there because a cancelled id is
// remembered for done_window, so the slots an edit cancelled could not be parked again
// under the same id.
func OccurrenceID(id string, slot, gen int64) string {
	s := id + "@" + strconv.FormatInt(slot, 10)
	if gen > 1 {
		s += "~" + strconv.FormatInt(gen, 10)
	}
	return s
}

// SlotOf parses an occurrence id back into schedule id and slot.
func SlotOf(occurrence string) (id string, slot int64, ok bool) {
	i := strings.LastIndexByte(occurrence, '@')
	if i <= 0 {
		return "", 0, false
	}
	rest := occurrence[i+1:]
	if j := strings.IndexByte(rest, '~'); j >= 0 {
		rest = rest[:j]
	}
	slot, err := strconv.ParseInt(rest, 10, 64)
	return occurrence[:i], slot, err == nil
}

// Due is the due time of the slot: the slot plus the jitter, a fraction of JitterMs
// hashed from the schedule id and the slot, so every instance computes the same.
func (d *Definition) Due(slot int64) int64 {
	if d.JitterMs <= 0 {
		return slot
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(d.ID + "@" + strconv.FormatInt(slot, 10)))
	return slot + int64(h.Sum64()%uint64(d.JitterMs+1))
}

// Slots returns the slots of sp within the definition's start and end in (after,
// upTo] (unix ms), ascending, at most max; more reports that the list was cut there.
func (d *Definition) Slots(sp Spec, after, upTo int64, max int) (slots []int64, more bool) {
	t := time.UnixMilli(after)
	if !d.Start.IsZero() && d.Start.UnixMilli()-1 > after {
		t = time.UnixMilli(d.Start.UnixMilli() - 1)
	}
	for {
		n, ok := sp.Next(t)
		if !ok || n.UnixMilli() > upTo || (!d.End.IsZero() && n.After(d.End)) {
			return slots, false
		}
		if len(slots) == max {
			return slots, true
		}
		slots = append(slots, n.UnixMilli())
		t = n
	}
}

// NextSlots returns up to n slots after now (for GET /v1/schedules/{id}).
func (d *Definition) NextSlots(sp Spec, now int64, n int) []int64 {
	out, _ := d.Slots(sp, now, now+100*365*24*3600*1000, n)
	return out
}

// sortedHeaderKeys is the headers' names in order (envelopes carry them sorted).
func sortedHeaderKeys(h map[string]string) []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
