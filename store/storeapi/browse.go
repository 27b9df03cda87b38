package storeapi

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Browse limits.
const (
	BrowseDefaultLimit = 100
	BrowseMaxLimit     = 1000
	// BrowseMinScan is the least number of candidates a page examines before it gives
	// up on a filter that matches rarely (it then returns what it found and a cursor).
	BrowseMinScan = 2000
)

// BrowseQuery selects messages in one state, in (score, id) order: for StatePending
// the score is the due time, for StateInflight the lease deadline, for StateDead the
// time dead-lettered.
type BrowseQuery struct {
	State     State  // StatePending (default), StateInflight or StateDead
	Route     string // "" = every route
	From, To  int64  // score range, inclusive; 0 = unbounded
	IDPrefix  string // "" = any id
	KeyPrefix string // "" = any key (compared with the Kafka key's bytes)
	Limit     int    // page size: default BrowseDefaultLimit, at most BrowseMaxLimit
	Cursor    string // "" = first page; else a previous page's Next
	// MaxScan bounds the candidates one page examines (default max(20×Limit,
	// BrowseMinScan)): a filter that matches rarely returns a short page and a cursor,
	// never a scan of the whole store.
	MaxScan int
}

// Normalize fills q's defaults (state pending, limit, MaxScan, To unbounded as
// math.MaxInt64) and checks it; errors wrap ErrInvalid. Stores call it first.
func (q *BrowseQuery) Normalize() error {
	if q.State == "" {
		q.State = StatePending
	}
	switch q.State {
	case StatePending, StateInflight, StateDead:
	default:
		return fmt.Errorf("%w: cannot browse state %q (pending, inflight or dead)", ErrInvalid, q.State)
	}
	if q.Limit <= 0 {
		q.Limit = BrowseDefaultLimit
	}
	q.Limit = min(q.Limit, BrowseMaxLimit)
	if q.MaxScan <= 0 {
		q.MaxScan = max(20*q.Limit, BrowseMinScan)
	}
	if q.To == 0 {
		q.To = math.MaxInt64
	}
	if q.From > q.To {
		return fmt.Errorf("%w: range from %d is after to %d", ErrInvalid, q.From, q.To)
	}
	return nil
}

// Matches reports whether e passes q's route, id-prefix and key-prefix filters (the
// state and score range are the store's to check).
func (q BrowseQuery) Matches(e *envelope.Envelope) bool {
	if q.Route != "" && e.Route != q.Route {
		return false
	}
	if q.IDPrefix != "" && !strings.HasPrefix(e.ID, q.IDPrefix) {
		return false
	}
	return q.KeyPrefix == "" || strings.HasPrefix(string(e.Key), q.KeyPrefix)
}

// BrowseItem is one message of a page. Score is the state's score (see BrowseQuery);
// for a pending message Envelope.DueAt is that score (a reschedule rewrites both).
type BrowseItem struct {
	Score    int64
	Envelope *envelope.Envelope
}

// BrowsePage is one page. Next is "" when nothing after it can match; otherwise pass it
// as the next query's Cursor (with the same filters). A page may hold fewer than Limit
// items and still have a Next: the filter matched rarely and MaxScan ran out. Scanned
// is how many candidates the page examined.
type BrowsePage struct {
	Items   []BrowseItem
	Next    string
	Scanned int
}

// EncodeCursor is the cursor of a page that ends at (score, id) in state st: opaque to
// clients, valid only for the same state.
func EncodeCursor(st State, score int64, id string) string {
	raw := string(st) + "\x00" + strconv.FormatInt(score, 10) + "\x00" + id
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// DecodeCursor reads an EncodeCursor cursor of state st back; anything else fails with
// ErrBadCursor.
func DecodeCursor(st State, c string) (score int64, id string, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	parts := strings.SplitN(string(raw), "\x00", 3)
	if len(parts) != 3 || State(parts[0]) != st || parts[2] == "" {
		return 0, "", fmt.Errorf("%w: not a %s cursor", ErrBadCursor, st)
	}
	score, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	return score, parts[2], nil
}
