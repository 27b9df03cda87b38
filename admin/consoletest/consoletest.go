package consoletest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delay-bridge/admin"
)

// Config says which console to drive.
type Config struct {
	// URL is the admin server ("http://127.0.0.1:port"); Token its admin.token (the
	// scenario signs in with it, after a wrong token; it must not be empty).
	URL, Token string
	// Route is a configured route without messages yet: the scenario schedules five
	// messages on it (due in 10 to 14 minutes) and browses, cancels and reschedules
	// them. Other is a second route that gets three (due in 1 to 3 hours).
	Route, Other string
	// Keys says Route has order: key: the scenario ends in the key view of one key
	// (cust-0), and cancels the key there.
	Keys bool
}

// Run plays the scenario. The backend must schedule, browse and run jobs; dead letters
// are checked against GET /v1/dead whatever it holds (none is fine).
func Run(t *testing.T, c Config) {
	api := admin.NewClient(c.URL, c.Token, nil)
	seeded := seed(t, api, c)
	b := browser{t: t, ctx: Chromium(t), dir: Artifacts(t)}
	t.Logf("screenshots in %s", b.dir)

	b.do("open the console", chromedp.Navigate(c.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#login")))
	b.do("wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "guess"), chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")))
	if got := b.text("#login-error"); got != "The token was refused. Enter the admin token." {
		t.Errorf("wrong token: %q", got)
	}
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), c.Token), chromedp.Click(chromedp.CSS("#login-submit")))
	b.page("overview")
	checkOverview(t, b, api, c)
	b.shot("overview")

	browsePages(t, b, c, seeded)
	cancelOne(t, b, api, seeded[3])
	bulkJob(t, b, api, c, seeded)
	deadLetters(t, b, api)
	schedulesPage(t, b, api, c)
	if c.Keys {
		keysPage(t, b, api, c, seeded)
	}
}

// seed schedules the scenario's messages through the API and returns the ids on Route,
// in due order.
func seed(t *testing.T, api *admin.Client, c Config) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		delay := int64(10+i) * 60_000
		payload := fmt.Sprintf(`{"invoice":%d,"amount":"%d.00 EUR"}`, 4000+i, 10*(i+1))
		key := fmt.Sprintf("cust-%d", i%2)
		res, err := api.Schedule(ctx, admin.ScheduleBody{ID: fmt.Sprintf("inv-%d", 4000+i), Route: c.Route, DelayMs: &delay,
			Payload: &payload, Key: &key, Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6-01"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	for i := range 3 {
		delay := int64(i+1) * 3_600_000
		if _, err := api.Schedule(ctx, admin.ScheduleBody{ID: fmt.Sprintf("ord-%d", i), Route: c.Other, DelayMs: &delay}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// checkOverview compares the overview's route rows with the API: counts (from
// /v1/routes, else /v1/stats, else a dash), ingress state, lateness.
func checkOverview(t *testing.T, b browser, api *admin.Client, c Config) {
	t.Helper()
	ctx := context.Background()
	routes, err := api.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := api.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lat, err := api.Lateness(ctx, 5*time.Minute)
	if errors.Is(err, admin.ErrNotImplemented) { // no metrics registry behind this server
		for _, name := range []string{c.Route, c.Other} {
			if got := b.text(`tr[data-route="` + name + `"] td.p99`); got != "—" {
				t.Errorf("overview %s p99 = %q without lateness data", name, got)
			}
		}
	} else if err != nil {
		t.Fatal(err)
	}
	rows := b.rows("table.routes tbody tr")
	if !slices.Contains(rows, c.Route) || !slices.Contains(rows, c.Other) {
		t.Fatalf("overview rows %v lack %s or %s", rows, c.Route, c.Other)
	}
	for _, r := range routes.Routes {
		row := `tr[data-route="` + r.Name + `"] `
		want := "—"
		if r.Counts != nil {
			want = fmt.Sprint(r.Counts.Pending)
		} else if n, ok := stats.Routes[r.Name]; ok {
			want = fmt.Sprint(n.Pending)
		}
		if got := b.text(row + "td.pending"); got != want {
			t.Errorf("overview %s pending = %q, the API says %s", r.Name, got, want)
		}
		if got := b.text(row + "td.ingress"); !strings.Contains(got, r.Ingress.Source) {
			t.Errorf("overview %s ingress = %q, want its source %s", r.Name, got, r.Ingress.Source)
		}
	}
	for _, l := range lat.Routes {
		got := b.text(`tr[data-route="` + l.Route + `"] td.p99`)
		if l.Count > 0 != (strings.HasSuffix(got, "ms") || strings.HasSuffix(got, " s")) {
			t.Errorf("overview %s p99 = %q with %d deliveries in the window", l.Route, got, l.Count)
		}
	}
}

// browsePages filters Route 3 per page: due order, then the next page.
func browsePages(t *testing.T, b browser, c Config, seeded []string) {
	t.Helper()
	b.then("browse", "browse "+c.Route, chromedp.Click(chromedp.CSS(`tr[data-route="`+c.Route+`"] td a`)))
	b.then("browse", "3 per page", chromedp.SetValue(chromedp.CSS("#f-limit"), "3"), chromedp.Click(chromedp.CSS("#apply")))
	if got := b.rows("table.messages tbody tr"); !slices.Equal(got, seeded[:3]) {
		b.fatal("page 1 = %v, want %v", got, seeded[:3])
	}
	b.shot("browse")
	b.then("browse", "next page", chromedp.Click(chromedp.CSS("#next-page")))
	if got := b.rows("table.messages tbody tr"); !slices.Equal(got, seeded[3:]) || !strings.HasPrefix(b.text("#page-info"), "Page 2") {
		b.fatal("page 2 = %v (%s), want %v", got, b.text("#page-info"), seeded[3:])
	}
}

// cancelOne opens id from the page, checks what it shows and cancels it.
func cancelOne(t *testing.T, b browser, api *admin.Client, id string) {
	t.Helper()
	b.then("message", "open "+id, chromedp.Click(chromedp.CSS(`tr[data-id="`+id+`"] a.msg-id`)))
	if got := b.text("#payload"); got != `{"invoice":4003,"amount":"40.00 EUR"}` {
		t.Errorf("payload shown = %q", got)
	}
	if got := b.text("table.headers"); !strings.Contains(got, "traceparent") || !strings.Contains(got, "00-4bf92f3577b34da6-01") {
		t.Errorf("headers shown = %q", got)
	}
	if got := b.text("#fields"); !strings.Contains(got, "cust-1") || !strings.Contains(got, "pending") {
		t.Errorf("fields shown = %q", got)
	}
	b.shot("message")
	b.do("cancel", chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.shot("cancel-confirm")
	b.then("message", "confirm cancel", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.do("cancelled", chromedp.WaitVisible(chromedp.CSS(`h1 .badge.cancelled`)))
	if got := b.text("#flash"); got != "Cancelled "+id+" (was pending)." {
		t.Errorf("flash = %q", got)
	}
	if m, err := api.Get(context.Background(), id); err != nil || m.State != admin.StateCancelled {
		t.Errorf("after the console's cancel the API says %+v, %v", m, err)
	}
}

// bulkJob reschedules Route by +1h: dry run first (4 left after the cancel), then the
// job, then the due times through the API.
func bulkJob(t *testing.T, b browser, api *admin.Client, c Config, seeded []string) {
	t.Helper()
	ctx := context.Background()
	b.then("browse", "back to browse", chromedp.Navigate(c.URL+"/ui/#/browse?route="+c.Route))
	b.then("jobs", "bulk action", chromedp.Click(chromedp.CSS("#bulk")))
	if v, err := chromedp.Run(b.ctx, chromedp.Value(chromedp.CSS("#f-route"))); err != nil || v != c.Route {
		b.fatal("job filter route = %q, %v", v, err)
	}
	b.do("reschedule +1h", chromedp.SetValue(chromedp.CSS("#kind"), "reschedule"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('kind').dispatchEvent(new Event('change'))`),
		chromedp.SendKeys(chromedp.CSS("#when"), "+1h"), chromedp.Click(chromedp.CSS("#preview-btn")),
		chromedp.WaitVisible(chromedp.CSS("#matched")))
	if got := b.text("#matched"); got != "4 messages" {
		t.Errorf("dry run matched %q, want 4 messages (5 seeded, 1 cancelled)", got)
	}
	left := []string{seeded[0], seeded[1], seeded[2], seeded[4]}
	if got := b.rows("#preview table tbody tr"); !slices.Equal(got, left) {
		t.Errorf("dry-run sample = %v, want %v", got, left)
	}
	before, err := api.Get(ctx, seeded[0])
	if err != nil || before.DueAt == 0 || before.State != admin.StatePending {
		b.fatal("after the dry run %s: %+v %v", seeded[0], before, err)
	}
	b.shot("job-preview")
	b.do("run the job", chromedp.Click(chromedp.CSS("#run")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.then("jobs", "confirm the job", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.do("job done", chromedp.WaitVisible(chromedp.CSS(`#job-state .badge.done`)))
	if got, want := b.text("#job-matched")+"/"+b.text("#job-done"), "4/4"; got != want {
		t.Errorf("job matched/done = %s, want %s", got, want)
	}
	b.shot("job")
	if after, err := api.Get(ctx, seeded[0]); err != nil || after.DueAt != before.DueAt+time.Hour.Milliseconds() {
		t.Errorf("after the job %s is due %d, want %d (%v)", seeded[0], after.DueAt, before.DueAt+time.Hour.Milliseconds(), err)
	}
}

// deadLetters compares the dead-letter page with GET /v1/dead and requeues the first.
func deadLetters(t *testing.T, b browser, api *admin.Client) {
	t.Helper()
	ctx := context.Background()
	b.then("dead", "dead letters", chromedp.Click(chromedp.CSS(`#nav a[data-page="dead"]`)))
	dead, err := api.ListDead(ctx, admin.Query{})
	if err != nil {
		t.Fatal(err)
	}
	b.shot("dead")
	if len(dead.Messages) == 0 {
		if got := b.text("#empty"); got != "No messages on this page." {
			t.Errorf("no dead letters, the page shows %q", got)
		}
		return
	}
	var want []string
	for _, m := range dead.Messages {
		want = append(want, m.ID)
	}
	if got := b.rows("table.messages tbody tr"); !slices.Equal(got, want) {
		b.fatal("dead letters shown %v, the API lists %v", got, want)
	}
	first := dead.Messages[0]
	if got := b.text(`tr[data-id="` + first.ID + `"] td.reason`); got != first.Reason {
		t.Errorf("reason shown %q, want %q", got, first.Reason)
	}
	b.do("requeue", chromedp.Click(chromedp.CSS(`tr[data-id="`+first.ID+`"] button`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.then("dead", "confirm requeue", chromedp.Click(chromedp.CSS("#confirm-yes")))
	if got := b.text("#flash"); got != "Requeued "+first.ID+": due now." {
		t.Errorf("flash = %q", got)
	}
	if got := b.rows("table.messages tbody tr"); slices.Contains(got, first.ID) {
		t.Errorf("requeued %s still listed: %v", first.ID, got)
	}
	if m, err := api.Get(ctx, first.ID); err != nil || m.State == admin.StateDead {
		t.Errorf("after requeue: %+v %v", m, err)
	}
}
