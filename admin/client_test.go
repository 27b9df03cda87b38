package admin

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestClientAgainstServer(t *testing.T) {
	f := newFake()
	ts := httptest.NewServer(newTestServer(f, "tok"))
	defer ts.Close()
	ctx := context.Background()
	c := NewClient(ts.URL, "tok", nil)

	payload := "hi"
	delay := int64(1500)
	res, err := c.Schedule(ctx, ScheduleBody{ID: "c1", Route: "orders", Payload: &payload, DelayMs: &delay,
		Headers: map[string]string{"h": "v"}})
	if err != nil || res.ID != "c1" || res.DueAt != 1_700_000_001_500 || res.Duplicate {
		t.Fatalf("Schedule = %+v, %v", res, err)
	}
	res, err = c.Schedule(ctx, ScheduleBody{ID: "c1", Route: "orders", DeliverAt: UnixMilli(1_700_000_000_005)})
	if err != nil || !res.Duplicate {
		t.Errorf("duplicate Schedule = %+v, %v", res, err)
	}
	_, err = c.Schedule(ctx, ScheduleBody{Route: "nope", DelayMs: &delay})
	var ae *APIError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ae) || ae.Field != "route" || ae.Status != 400 {
		t.Errorf("bad route: %v (%+v)", err, ae)
	}

	m, err := c.Get(ctx, "c1")
	if err != nil || m.State != StatePending || m.PayloadSize != 2 || m.Headers["h"] != "v" || m.Source != "http" {
		t.Errorf("Get = %+v, %v", m, err)
	}
	if m, err := c.Get(ctx, "orders.delay/0/42"); err != nil || m.ID != "orders.delay/0/42" {
		t.Errorf("Get slash id = %+v, %v", m, err)
	}
	if _, err := c.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get unknown = %v", err)
	}

	at := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	if r, err := c.Reschedule(ctx, "orders.delay/0/42", RescheduleBody{DeliverAt: &Timestamp{at}}); err != nil || r.DueAt != at.UnixMilli() {
		t.Errorf("Reschedule = %+v, %v", r, err)
	}
	if _, err := c.Reschedule(ctx, "fly", RescheduleBody{DelayMs: &delay}); !errors.Is(err, ErrConflict) {
		t.Errorf("Reschedule inflight = %v", err)
	}

	if cr, err := c.Cancel(ctx, "c1"); err != nil || cr.PriorState != StatePending || cr.ID != "c1" {
		t.Errorf("Cancel = %+v, %v", cr, err)
	}
	if _, err := c.Cancel(ctx, "c1"); !errors.Is(err, ErrConflict) {
		t.Errorf("Cancel of a cancelled message = %v", err)
	}

	st, err := c.Stats(ctx)
	if err != nil || st.Totals.Pending != 3 || len(st.Shards) != 2 || st.Routes["orders"].Dead != 1 {
		t.Errorf("Stats = %+v, %v", st, err)
	}

	dl, err := c.ListDead(ctx, Query{Limit: 10})
	if err != nil || dl.Count != 1 || dl.Messages[0].ID != "d1" || f.lastLim != 10 {
		t.Errorf("ListDead = %+v, %v", dl, err)
	}
	if r, err := c.RequeueDead(ctx, "d1"); err != nil || r.ID != "d1" {
		t.Errorf("RequeueDead = %+v, %v", r, err)
	}
	if _, err := c.RequeueDead(ctx, "d1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RequeueDead again = %v", err)
	}
	f.msgs["d9"] = &Message{ID: "d9", State: StateDead}
	if p, err := c.PurgeDead(ctx, ""); err != nil || p.Purged != 1 {
		t.Errorf("PurgeDead = %+v, %v", p, err)
	}

	if err := c.Ready(ctx); err != nil {
		t.Errorf("Ready = %v", err)
	}
	f.notReady = errors.New("no shards owned yet")
	if err := c.Ready(ctx); !errors.Is(err, ErrUnavailable) || !errors.As(err, &ae) || ae.Message != "no shards owned yet" {
		t.Errorf("Ready not ready = %v", err)
	}

	// Wrong token.
	if _, err := NewClient(ts.URL, "bad", nil).Stats(ctx); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("bad token = %v", err)
	}
	// Bare host:port.
	if _, err := NewClient(ts.Listener.Addr().String(), "tok", nil).Stats(ctx); err != nil {
		t.Errorf("host:port base = %v", err)
	}
	// Nothing listening.
	dead := httptest.NewServer(nil)
	url := dead.URL
	dead.Close()
	if _, err := NewClient(url, "", nil).Stats(ctx); err == nil {
		t.Error("no error from a closed server")
	}
	ts.Client().CloseIdleConnections()
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]int64{
		"1700000000000":                  1_700_000_000_000,
		"2023-11-14T22:13:20Z":           1_700_000_000_000,
		"2023-11-14T23:13:20.5+01:00":    1_700_000_000_500,
		" 1700000000000 ":                1_700_000_000_000,
		"2023-11-14T22:13:20.123456789Z": 1_700_000_000_123,
	} {
		got, err := ParseTime(in)
		if err != nil || got.UnixMilli() != want {
			t.Errorf("ParseTime(%q) = %v (%d), %v", in, got, got.UnixMilli(), err)
		}
	}
	if _, err := ParseTime("next tuesday"); err == nil {
		t.Error("ParseTime accepted garbage")
	}
}

func TestClientBrowseAndJobs(t *testing.T) {
	f := newFake()
	seed(f, "billing", 5, 2_000_000_000_000)
	ts := httptest.NewServer(newTestServer(f, "tok"))
	defer ts.Close()
	defer ts.Client().CloseIdleConnections()
	ctx := context.Background()
	c := NewClient(ts.URL, "tok", ts.Client())

	flt := Filter{Route: "billing", DueFrom: 2_000_000_001_000, IDPrefix: "billing-p", KeyPrefix: "k"}
	var got []string
	q := Query{Filter: flt, Limit: 2}
	for {
		page, err := c.Browse(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Messages {
			got = append(got, m.ID+"="+m.Key)
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	if want := "billing-p01=k1,billing-p02=k0,billing-p03=k1,billing-p04=k0"; strings.Join(got, ",") != want {
		t.Errorf("browse = %v, want %s", got, want)
	}
	if f.lastQuery.Filter != (Filter{Route: "billing", State: StatePending, DueFrom: 2_000_000_001_000, IDPrefix: "billing-p", KeyPrefix: "k"}) {
		t.Errorf("server got %+v", f.lastQuery.Filter)
	}
	if _, err := c.Browse(ctx, Query{Filter: Filter{State: "gone"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad state: %v", err)
	}
	if dl, err := c.ListDead(ctx, Query{Filter: Filter{Route: "orders"}}); err != nil || dl.Count != 1 || f.lastQuery.Filter.Route != "orders" {
		t.Errorf("ListDead by route = %+v, %v", dl, err)
	}

	shift := int64(1000)
	p, err := c.PreviewJob(ctx, JobBody{Kind: JobReschedule, Filter: Filter{Route: "billing"}, ShiftMs: &shift})
	if err != nil || p.Matched != 5 || !p.DryRun || len(p.Sample) != 5 || f.msgs["billing-p00"].DueAt != 2_000_000_000_000 {
		t.Fatalf("PreviewJob = %+v, %v", p, err)
	}
	if _, err := c.StartJob(ctx, JobBody{Kind: JobCancel, DryRun: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("StartJob with dry_run: %v", err)
	}
	job, err := c.StartJob(ctx, JobBody{Kind: JobReschedule, Filter: Filter{Route: "billing"}, ShiftMs: &shift})
	if err != nil || job.State != JobQueued {
		t.Fatalf("StartJob = %+v, %v", job, err)
	}
	if j, err := c.GetJob(ctx, job.ID); err != nil || j.State != JobDone || j.Done != 5 || f.msgs["billing-p00"].DueAt != 2_000_000_001_000 {
		t.Errorf("GetJob = %+v, %v", j, err)
	}
	if jobs, err := c.ListJobs(ctx, 0); err != nil || len(jobs) != 1 || f.lastLim != DefaultJobList {
		t.Errorf("ListJobs = %+v, %v (limit %d)", jobs, err, f.lastLim)
	}
	if _, err := c.GetJob(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetJob unknown: %v", err)
	}
	if r, err := c.PurgeDead(ctx, "orders"); err != nil || r.Purged != 1 || f.lastFilter.Route != "orders" {
		t.Errorf("PurgeDead(orders) = %+v, %v", r, err)
	}
	// No lateness histogram in this server's registry: no routes, the window asked.
	if l, err := c.Lateness(ctx, 10*time.Minute); err != nil || l.WindowMs != 600_000 || len(l.Routes) != 0 {
		t.Errorf("Lateness = %+v, %v", l, err)
	}
}
