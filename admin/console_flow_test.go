package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
)

// runConsole is the console scenario against backend, which must know the routes
// "orders" and "billing" and have no billing messages yet. It seeds through the API.
func runConsole(t *testing.T, backend Backend, g prometheus.Gatherer) {
	const token = "s3cret"
	base := serve(t, backend, g, token)
	api := NewClient(base, token, nil)
	defer api.http.CloseIdleConnections()
	ctx := context.Background()
	var billing []string
	for i := range 5 {
		delay := int64(10+i) * 60_000
		payload := fmt.Sprintf(`{"invoice":%d,"amount":"%d.00 EUR"}`, 4000+i, 10*(i+1))
		res, err := api.Schedule(ctx, ScheduleBody{ID: fmt.Sprintf("inv-%d", 4000+i), Route: "billing", DelayMs: &delay,
			Payload: &payload, Key: ptrTo(fmt.Sprintf("cust-%d", i%2)), Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6-01"}})
		if err != nil {
			t.Fatal(err)
		}
		billing = append(billing, res.ID)
	}
	for i := range 3 {
		delay := int64(i+1) * 3_600_000
		if _, err := api.Schedule(ctx, ScheduleBody{ID: fmt.Sprintf("ord-%d", i), Route: "orders", DelayMs: &delay}); err != nil {
			t.Fatal(err)
		}
	}

	b := browser{t: t, ctx: chromium(t), dir: artifacts(t)}
	t.Logf("screenshots in %s", b.dir)

	// Sign in: the page asks for the token (the API answered 401 without it).
	b.do("open the console", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#login")))
	b.do("wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "guess"), chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")))
	if got := b.text("#login-error"); got != "The token was refused. Enter the admin token." {
		t.Errorf("wrong token: %q", got)
	}
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#login-submit")))

	// Overview: per-route counts as the API reports them, ingress state, lateness.
	b.page("overview")
	routes, err := api.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.rows("table.routes tbody tr"); !slices.Equal(got, []string{"billing", "orders"}) {
		t.Fatalf("overview routes = %v", got)
	}
	for _, r := range routes.Routes {
		row := `tr[data-route="` + r.Name + `"] `
		if got, want := b.text(row+"td.pending"), fmt.Sprint(r.Counts.Pending); got != want {
			t.Errorf("overview %s pending = %q, API says %s", r.Name, got, want)
		}
		if got, want := b.text(row+"td.dead"), fmt.Sprint(r.Counts.Dead); got != want {
			t.Errorf("overview %s dead = %q, API says %s", r.Name, got, want)
		}
		if !strings.Contains(b.text(row+"td.ingress"), "consuming") || !strings.HasSuffix(b.text(row+"td.p99"), "ms") {
			t.Errorf("overview %s: ingress %q, p99 %q", r.Name, b.text(row+"td.ingress"), b.text(row+"td.p99"))
		}
	}
	b.shot("overview")

	// Browse billing, 3 per page: due order, then the next page.
	b.then("browse", "browse billing", chromedp.Click(chromedp.CSS(`tr[data-route="billing"] td a`)))
	b.then("browse", "3 per page", chromedp.SetValue(chromedp.CSS("#f-limit"), "3"), chromedp.Click(chromedp.CSS("#apply")))
	if got := b.rows("table.messages tbody tr"); !slices.Equal(got, billing[:3]) {
		t.Fatalf("page 1 = %v, want %v", got, billing[:3])
	}
	b.shot("browse")
	b.then("browse", "next page", chromedp.Click(chromedp.CSS("#next-page")))
	if got := b.rows("table.messages tbody tr"); !slices.Equal(got, billing[3:]) || !strings.HasPrefix(b.text("#page-info"), "Page 2") {
		t.Fatalf("page 2 = %v (%s), want %v", got, b.text("#page-info"), billing[3:])
	}

	// Detail of the first one on page 2: payload and headers; then cancel it.
	victim := billing[3]
	b.then("message", "open "+victim, chromedp.Click(chromedp.CSS(`tr[data-id="`+victim+`"] a.msg-id`)))
	if got := b.text("#payload"); got != `{"invoice":4003,"amount":"40.00 EUR"}` {
		t.Errorf("payload shown = %q", got)
	}
	if got := b.text("table.headers"); !strings.Contains(got, "traceparent") || !strings.Contains(got, "00-4bf92f3577b34da6-01") {
		t.Errorf("headers shown = %q", got)
	}
	if got := b.text("#fields"); !strings.Contains(got, "cust-1") || !strings.Contains(got, "billing") {
		t.Errorf("fields shown = %q", got)
	}
	b.shot("message")
	b.do("cancel", chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.shot("cancel-confirm")
	b.then("message", "confirm cancel", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.do("cancelled", chromedp.WaitVisible(chromedp.CSS(`h1 .badge.cancelled`)))
	if got := b.text("#flash"); got != "Cancelled "+victim+" (was pending)." {
		t.Errorf("flash = %q", got)
	}
	if m, err := api.Get(ctx, victim); err != nil || m.State != StateCancelled {
		t.Errorf("after the console's cancel the API says %+v, %v", m, err)
	}

	// A bulk job over the billing filter: reschedule by +1h, previewed first.
	b.then("browse", "back to browse", chromedp.Navigate(base+"/ui/#/browse?route=billing"))
	b.then("jobs", "bulk action", chromedp.Click(chromedp.CSS("#bulk")))
	if v, err := chromedp.Run(b.ctx, chromedp.Value(chromedp.CSS("#f-route"))); err != nil || v != "billing" {
		t.Fatalf("job filter route = %q, %v", v, err)
	}
	b.do("reschedule +1h", chromedp.SetValue(chromedp.CSS("#kind"), "reschedule"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('kind').dispatchEvent(new Event('change'))`),
		chromedp.SendKeys(chromedp.CSS("#when"), "+1h"), chromedp.Click(chromedp.CSS("#preview-btn")),
		chromedp.WaitVisible(chromedp.CSS("#matched")))
	if got := b.text("#matched"); got != "4 messages" {
		t.Errorf("dry run matched %q, want 4 messages (5 seeded, 1 cancelled)", got)
	}
	if got := b.rows("#preview table tbody tr"); !slices.Equal(got, []string{billing[0], billing[1], billing[2], billing[4]}) {
		t.Errorf("dry-run sample = %v", got)
	}
	before, err := api.Get(ctx, billing[0])
	if err != nil || before.DueAt == 0 {
		t.Fatalf("before the job: %+v %v", before, err)
	}
	b.shot("job-preview")
	b.do("run the job", chromedp.Click(chromedp.CSS("#run")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.then("jobs", "confirm the job", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.do("job done", chromedp.WaitVisible(chromedp.CSS(`#job-state .badge.done`)))
	if got, want := b.text("#job-matched")+"/"+b.text("#job-done"), "4/4"; got != want {
		t.Errorf("job matched/done = %s, want %s", got, want)
	}
	b.shot("job")
	if after, err := api.Get(ctx, billing[0]); err != nil || after.DueAt != before.DueAt+time.Hour.Milliseconds() {
		t.Errorf("after the job %s is due %d, want %d (%v)", billing[0], after.DueAt, before.DueAt+time.Hour.Milliseconds(), err)
	}

	// Dead letters with reasons, as the API lists them; requeue the first.
	b.then("dead", "dead letters", chromedp.Click(chromedp.CSS(`#nav a[data-page="dead"]`)))
	dead, err := api.ListDead(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range dead.Messages {
		want = append(want, m.ID)
	}
	if got := b.rows("table.messages tbody tr"); len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("dead letters shown %v, API lists %v", got, want)
	}
	if got := b.text(`tr[data-id="` + want[0] + `"] td.reason`); got != dead.Messages[0].Reason {
		t.Errorf("reason shown %q, want %q", got, dead.Messages[0].Reason)
	}
	b.shot("dead")
	b.do("requeue", chromedp.Click(chromedp.CSS(`tr[data-id="`+want[0]+`"] button`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.then("dead", "confirm requeue", chromedp.Click(chromedp.CSS("#confirm-yes")))
	if got := b.text("#flash"); got != "Requeued "+want[0]+": due now." {
		t.Errorf("flash = %q", got)
	}
	if got := b.rows("table.messages tbody tr"); slices.Contains(got, want[0]) {
		t.Errorf("requeued %s still listed: %v", want[0], got)
	}
	if m, err := api.Get(ctx, want[0]); err != nil || m.State != StatePending {
		t.Errorf("after requeue: %+v %v", m, err)
	}
}

func ptrTo[T any](v T) *T { return &v }
