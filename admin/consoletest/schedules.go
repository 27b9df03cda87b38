package consoletest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delay-bridge/admin"
)

// schedulesPage creates a recurring schedule through the console's form on Route,
// checks its page against GET /v1/schedules/{id} (the next slots), finds it in the
// list, pauses it and deletes it there.
func schedulesPage(t *testing.T, b browser, api *admin.Client, c Config) {
	t.Helper()
	ctx := context.Background()
	const id = "console-hourly"
	b.then("schedules", "schedules", chromedp.Click(chromedp.CSS(`#nav a[data-page="schedules"]`)))
	b.do("fill the form", chromedp.SendKeys(chromedp.CSS("#s-id"), id), chromedp.SendKeys(chromedp.CSS("#s-route"), c.Route),
		chromedp.SendKeys(chromedp.CSS("#s-spec"), "0 * * * *"), chromedp.SendKeys(chromedp.CSS("#s-payload"), `{"report":"hourly"}`),
		chromedp.SendKeys(chromedp.CSS("#s-jitter"), "30s"))
	b.then("schedules", "create", chromedp.Click(chromedp.CSS("#s-create")))
	b.do("its page", chromedp.WaitVisible(chromedp.CSS("table.next-slots")))
	s, err := api.GetSchedule(ctx, id)
	if err != nil || s.Route != c.Route || s.JitterMs != 30_000 || s.Payload != `{"report":"hourly"}` {
		b.fatal("created through the console: %+v, %v", s, err)
	}
	shown, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('table.next-slots tbody tr').length`))
	if err != nil || shown != len(s.Next) || shown == 0 {
		b.fatal("next slots shown %d, the API has %d (%v)", shown, len(s.Next), err)
	}
	if got := b.text("table.next-slots tbody tr:first-child code"); got != s.Next[0].ID {
		t.Errorf("first next slot shown %q, the API says %q", got, s.Next[0].ID)
	}
	b.shot("schedule")
	b.then("schedules", "back to the list", chromedp.Click(chromedp.CSS(`#nav a[data-page="schedules"]`)))
	list, err := api.ListSchedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, x := range list {
		want = append(want, x.ID)
	}
	if got := b.rows("table.schedules tbody tr"); !slices.Equal(got, want) || !slices.Contains(got, id) {
		b.fatal("schedules shown %v, the API lists %v", got, want)
	}
	b.then("schedules", "pause", chromedp.Click(chromedp.CSS(`tr[data-id="`+id+`"] button[data-action="pause"]`)))
	b.do("paused", chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+id+`"] .badge.paused`)))
	if s, err := api.GetSchedule(ctx, id); err != nil || !s.Paused {
		t.Errorf("after pause in the console: %+v %v", s, err)
	}
	b.shot("schedules")
	b.do("delete", chromedp.Click(chromedp.CSS(`tr[data-id="`+id+`"] button[data-action="delete"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.then("schedules", "confirm delete", chromedp.Click(chromedp.CSS("#confirm-yes")))
	if _, err := api.GetSchedule(ctx, id); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("after delete in the console: %v", err)
	}
	if slices.Contains(b.rows("table.schedules tbody tr"), id) {
		b.fatal("deleted schedule still listed")
	}
}
