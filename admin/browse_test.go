package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// seed adds n pending messages p00..p(n-1) on route, due 1s apart from base, keyed
// "k<i%2>".
func seed(f *fakeBackend, route string, n int, base int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("%s-p%02d", route, i)
		f.msgs[id] = &Message{ID: id, State: StatePending, Route: route, DueAt: base + int64(i)*1000,
			RawKey: fmt.Appendf(nil, "k%d", i%2), RawPayload: []byte("x")}
	}
}

func ids(t *testing.T, raw string) (out []string, next string) {
	t.Helper()
	var l MessageList
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		t.Fatal(err)
	}
	if l.Count != len(l.Messages) {
		t.Errorf("count %d != %d messages", l.Count, len(l.Messages))
	}
	for _, m := range l.Messages {
		if m.Payload != nil || m.PayloadBase64 != nil {
			t.Errorf("a list carries a payload: %+v", m)
		}
		out = append(out, m.ID)
	}
	return out, l.NextCursor
}

func TestBrowse(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "")
	seed(f, "billing", 7, 2_000_000_000_000)

	// Every page of route billing, 3 at a time, in due order, nothing twice or lost.
	var got []string
	path := "/v1/messages?route=billing&limit=3"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		r := do(t, s, "GET", path, "")
		r.expect(t, http.StatusOK, "messages", "count")
		page, next := ids(t, r.raw)
		got = append(got, page...)
		if next == "" {
			break
		}
		path = "/v1/messages?route=billing&limit=3&cursor=" + url.QueryEscape(next)
	}
	if strings.Join(got, ",") != "billing-p00,billing-p01,billing-p02,billing-p03,billing-p04,billing-p05,billing-p06" {
		t.Errorf("pages = %v", got)
	}
	if f.lastQuery.Filter.State != StatePending || f.lastQuery.Limit != 3 {
		t.Errorf("backend query = %+v (state defaults to pending)", f.lastQuery)
	}

	// Filters reach the backend parsed: RFC 3339 and ms, prefixes.
	r := do(t, s, "GET", "/v1/messages?route=billing&due_from=2033-05-18T03:33:21Z&due_to=2000000004000&id_prefix=billing-p0&key_prefix=k1", "")
	r.expect(t, http.StatusOK)
	if page, _ := ids(t, r.raw); strings.Join(page, ",") != "billing-p01,billing-p03" {
		t.Errorf("filtered = %v (%s)", page, r.raw)
	}
	want := Filter{Route: "billing", State: StatePending, DueFrom: 2_000_000_001_000, DueTo: 2_000_000_004_000, IDPrefix: "billing-p0", KeyPrefix: "k1"}
	if f.lastQuery.Filter != want || f.lastQuery.Limit != DefaultBrowseLimit {
		t.Errorf("backend query = %+v, want %+v", f.lastQuery, want)
	}
	// The key is shown as text, or base64 when it is not UTF-8.
	f.msgs["bin"] = &Message{ID: "bin", State: StatePending, Route: "orders", DueAt: 3, RawKey: []byte{0xff, 0}}
	r = do(t, s, "GET", "/v1/messages?id_prefix=bin", "")
	if !strings.Contains(r.raw, `"key_base64":"/wA="`) {
		t.Errorf("binary key: %s", r.raw)
	}

	bad := []struct{ query, field, contains string }{
		{"state=done", "state", "want one of pending, inflight, dead"},
		{"due_from=yesterday", "due_from", "RFC 3339"},
		{"due_from=2000000005000&due_to=2000000001000", "due_to", "after due_from"},
		{"due_to=1", "due_to", "unix seconds?"},
		{"limit=0", "limit", "between 1 and 1000"},
		{"limit=1001", "limit", "between 1 and 1000"},
		{"routes=orders", "routes", "unknown query parameter"},
		{"route=a&route=b", "route", "given 2 times"},
		{"route=nope", "route", "no route named"},   // from the backend
		{"cursor=%25%25", "cursor", "not a cursor"}, // from the backend
		{"id_prefix=" + strings.Repeat("x", 1025), "id_prefix", "longer than 1024"},
	}
	for _, c := range bad {
		t.Run(c.query, func(t *testing.T) {
			do(t, s, "GET", "/v1/messages?"+c.query, "").expectError(t, http.StatusBadRequest, c.field, c.contains)
		})
	}
}

func TestGetShowsKeyAndPayload(t *testing.T) {
	f := newFake()
	s := NewServer(Options{Backend: f, Logger: quiet, PayloadCap: 8})
	r := do(t, s, "GET", "/v1/messages/m1", "")
	r.expect(t, http.StatusOK, "payload", "key")
	if r.body["payload"] != "abc" || r.body["key"] != "cust-7" || r.body["payload_truncated"] != nil {
		t.Errorf("m1: %s", r.raw)
	}
	f.msgs["big"] = &Message{ID: "big", State: StatePending, RawPayload: []byte("héllo wörld"), PayloadSize: 13}
	r = do(t, s, "GET", "/v1/messages/big", "")
	// 8 bytes would split "ö": the text stops before it.
	if r.body["payload"] != "héllo w" || r.body["payload_truncated"] != true || r.body["payload_size"] != float64(13) {
		t.Errorf("capped text: %s", r.raw)
	}
	f.msgs["bin"] = &Message{ID: "bin", State: StateDead, RawPayload: []byte{0, 1, 2, 0xff, 4, 5, 6, 7, 8, 9}, PayloadSize: 10}
	r = do(t, s, "GET", "/v1/messages/bin", "")
	if r.body["payload_base64"] != "AAEC/wQFBgc=" || r.body["payload_truncated"] != true || r.body["payload"] != nil {
		t.Errorf("binary: %s", r.raw)
	}
	f.msgs["empty"] = &Message{ID: "empty", State: StatePending, RawPayload: []byte{}}
	r = do(t, s, "GET", "/v1/messages/empty", "")
	if p, ok := r.body["payload"]; !ok || p != "" {
		t.Errorf("empty payload must be shown as \"\": %s", r.raw)
	}
	do(t, s, "GET", "/v1/messages/m1?full=1", "").expectError(t, http.StatusBadRequest, "full", "unknown query parameter")
}

func TestDeadFiltersAndPaging(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "")
	for i := range 5 {
		id := fmt.Sprintf("dx%d", i)
		f.msgs[id] = &Message{ID: id, State: StateDead, Route: "billing", DeadAt: int64(100 + i), Reason: "unroutable"}
	}
	var got []string
	path := "/v1/dead?route=billing&limit=2"
	for range 4 {
		r := do(t, s, "GET", path, "")
		r.expect(t, http.StatusOK, "messages", "count")
		page, next := ids(t, r.raw)
		got = append(got, page...)
		if next == "" {
			break
		}
		path = "/v1/dead?route=billing&limit=2&cursor=" + url.QueryEscape(next)
	}
	if strings.Join(got, ",") != "dx0,dx1,dx2,dx3,dx4" || f.lastQuery.Filter.State != StateDead {
		t.Errorf("dead pages = %v, query %+v", got, f.lastQuery)
	}
	do(t, s, "GET", "/v1/dead?state=dead&route=orders", "").expect(t, http.StatusOK)
	if f.lastQuery.Filter.Route != "orders" {
		t.Errorf("route filter not passed: %+v", f.lastQuery)
	}
	do(t, s, "GET", "/v1/dead?state=pending", "").expectError(t, http.StatusBadRequest, "state", "only state dead")
	do(t, s, "GET", "/v1/dead?reason=x", "").expectError(t, http.StatusBadRequest, "reason", "unknown query parameter")

	// Purge by route: only that route's dead letters go.
	r := do(t, s, "DELETE", "/v1/dead?route=billing", "")
	r.expect(t, http.StatusOK, "purged")
	if r.body["purged"] != float64(5) || f.lastFilter != (Filter{Route: "billing", State: StateDead}) {
		t.Errorf("purge billing: %s, filter %+v", r.raw, f.lastFilter)
	}
	if _, ok := f.msgs["d1"]; !ok {
		t.Error("purging billing removed an orders dead letter")
	}
	do(t, s, "DELETE", "/v1/dead?id_prefix=d", "").expectError(t, http.StatusBadRequest, "id_prefix", "kind purge_dead")
}
