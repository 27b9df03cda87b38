package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Browse limits (GET /v1/messages, GET /v1/dead).
const (
	DefaultBrowseLimit = 100
	MaxBrowseLimit     = 1000
	// MaxPrefixBytes bounds id_prefix and key_prefix.
	MaxPrefixBytes = 1024
)

// Filter selects messages: GET /v1/messages and GET /v1/dead take it as query
// parameters, POST /v1/jobs as its "filter" object. Zero fields match everything; set
// fields must all match.
type Filter struct {
	// Route is a configured route name; an unknown one is a 400.
	Route string `json:"route,omitempty"`
	// State is pending (the default of browse), inflight or dead.
	State string `json:"state,omitempty"`
	// DueFrom (inclusive) and DueTo (exclusive) bound the message's due time, unix
	// milliseconds; 0 = unbounded. Given as unix milliseconds or RFC 3339.
	DueFrom int64 `json:"due_from,omitempty"`
	DueTo   int64 `json:"due_to,omitempty"`
	// IDPrefix matches the start of the message id; KeyPrefix the start of the Kafka
	// key (as bytes; messages without a key never match a non-empty prefix).
	IDPrefix  string `json:"id_prefix,omitempty"`
	KeyPrefix string `json:"key_prefix,omitempty"`
}

// Query is one page request of Backend.Browse.
type Query struct {
	Filter Filter
	Limit  int    // 1..MaxBrowseLimit
	Cursor string // "" = first page; else a Page.NextCursor of the same Filter
}

// Page is one page of Backend.Browse.
type Page struct {
	Messages []Message
	// NextCursor continues after the last message read; "" = nothing more.
	NextCursor string
}

// MessageList is the body of GET /v1/messages and GET /v1/dead. Count is
// len(Messages); a page may be short (even empty) while NextCursor is non-empty: keep
// paging until it is "".
type MessageList struct {
	Messages   []Message `json:"messages"`
	Count      int       `json:"count"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// DeadList is the answer of GET /v1/dead.
type DeadList = MessageList

// browseStates are the values of Filter.State.
var browseStates = []string{StatePending, StateInflight, StateDead}

// Check validates f: its state, its due range and its prefixes. prefix is put in front
// of field names ("filter." for a job body, "" for query parameters).
func (f Filter) Check(prefix string) error {
	if f.State != "" && !slices.Contains(browseStates, f.State) {
		return Invalid(prefix+"state", "want one of %s, got %q", strings.Join(browseStates, ", "), f.State)
	}
	if f.DueFrom < 0 {
		return Invalid(prefix+"due_from", "must not be negative")
	}
	if f.DueTo < 0 {
		return Invalid(prefix+"due_to", "must not be negative")
	}
	if f.DueFrom != 0 && f.DueTo != 0 && f.DueTo <= f.DueFrom {
		return Invalid(prefix+"due_to", "must be after due_from (%d <= %d)", f.DueTo, f.DueFrom)
	}
	if len(f.IDPrefix) > MaxPrefixBytes {
		return Invalid(prefix+"id_prefix", "longer than %d bytes", MaxPrefixBytes)
	}
	if len(f.KeyPrefix) > MaxPrefixBytes {
		return Invalid(prefix+"key_prefix", "longer than %d bytes", MaxPrefixBytes)
	}
	return nil
}

// Values encodes f as query parameters (the zero fields left out).
func (f Filter) Values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("route", f.Route)
	set("state", f.State)
	if f.DueFrom != 0 {
		v.Set("due_from", strconv.FormatInt(f.DueFrom, 10))
	}
	if f.DueTo != 0 {
		v.Set("due_to", strconv.FormatInt(f.DueTo, 10))
	}
	set("id_prefix", f.IDPrefix)
	set("key_prefix", f.KeyPrefix)
	return v
}

// UnmarshalJSON reads a filter strictly: unknown fields are errors, and due_from/due_to
// take unix milliseconds or RFC 3339 strings. Errors name "filter.<field>".
func (f *Filter) UnmarshalJSON(b []byte) error {
	var raw struct {
		Route     string          `json:"route"`
		State     string          `json:"state"`
		DueFrom   json.RawMessage `json:"due_from"`
		DueTo     json.RawMessage `json:"due_to"`
		IDPrefix  string          `json:"id_prefix"`
		KeyPrefix string          `json:"key_prefix"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
			name, _ = strconv.Unquote(name)
			return Invalid("filter."+name, "unknown field %q", name)
		}
		return Invalid("filter", "%s", msg)
	}
	var err error
	if f.DueFrom, err = jsonMillis(raw.DueFrom, "filter.due_from"); err != nil {
		return err
	}
	if f.DueTo, err = jsonMillis(raw.DueTo, "filter.due_to"); err != nil {
		return err
	}
	f.Route, f.State, f.IDPrefix, f.KeyPrefix = raw.Route, raw.State, raw.IDPrefix, raw.KeyPrefix
	return nil
}

// jsonMillis reads a JSON time (unix ms number or string, or RFC 3339 string); absent
// or null = 0.
func jsonMillis(raw json.RawMessage, field string) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var ts Timestamp
	if err := ts.UnmarshalJSON(raw); err != nil {
		msg := err.Error()
		var ie *InvalidError
		if errors.As(err, &ie) {
			msg = ie.Msg
		}
		return 0, Invalid(field, "%s", msg)
	}
	return ts.UnixMilli(), nil
}

// queryParams reads the query string strictly: every parameter must be in allowed and
// given once, so a misspelt or unsupported filter is a 400 naming it, never ignored.
func queryParams(q url.Values, allowed ...string) error {
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(allowed, k) {
			return Invalid(k, "unknown query parameter %q (accepted: %s)", k, strings.Join(allowed, ", "))
		}
		if len(q[k]) > 1 {
			return Invalid(k, "given %d times; give it once", len(q[k]))
		}
	}
	return nil
}

// filterParams are the query parameters of a Filter.
var filterParams = []string{"route", "state", "due_from", "due_to", "id_prefix", "key_prefix"}

// parseFilter reads the filter parameters of q (validated with Check).
func parseFilter(q url.Values) (Filter, error) {
	f := Filter{
		Route: q.Get("route"), State: q.Get("state"),
		IDPrefix: q.Get("id_prefix"), KeyPrefix: q.Get("key_prefix"),
	}
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"due_from", &f.DueFrom}, {"due_to", &f.DueTo}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		t, err := ParseTime(s)
		if err != nil {
			return Filter{}, Invalid(p.name, "%v", err)
		}
		*p.dst = t.UnixMilli()
	}
	return f, f.Check("")
}

// parseLimit reads the limit parameter: def when absent, else 1..max.
func parseLimit(q url.Values, def, max int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, Invalid("limit", "want an integer between 1 and %d, got %q", max, v)
	}
	return n, nil
}

// parseQuery reads a browse request: the filter, limit and cursor.
func parseQuery(q url.Values) (Query, error) {
	if err := queryParams(q, append(slices.Clone(filterParams), "limit", "cursor")...); err != nil {
		return Query{}, err
	}
	f, err := parseFilter(q)
	if err != nil {
		return Query{}, err
	}
	limit, err := parseLimit(q, DefaultBrowseLimit, MaxBrowseLimit)
	if err != nil {
		return Query{}, err
	}
	return Query{Filter: f, Limit: limit, Cursor: q.Get("cursor")}, nil
}
