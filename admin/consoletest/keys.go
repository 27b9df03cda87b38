package consoletest

import (
	"context"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delay-bridge/admin"
)

// keysPage (Config.Keys: Route has order: key): from the page of the first seeded
// message (key cust-0) to its key's view, which must list what GET /v1/keys lists, in
// that order, with the head marked; then the key's messages are cancelled there.
func keysPage(t *testing.T, b browser, api *admin.Client, c Config, seeded []string) {
	t.Helper()
	ctx := context.Background()
	b.then("message", "open "+seeded[0], chromedp.Navigate(c.URL+"/ui/#/message/"+seeded[0]))
	b.then("keys", "its key's order", chromedp.Click(chromedp.CSS("#key-link")))
	want, err := api.KeyMessages(ctx, c.Route, "cust-0")
	if err != nil || len(want.Messages) < 2 {
		b.fatal("GET /v1/keys/%s/cust-0 = %+v, %v: want the seeded messages of cust-0", c.Route, want, err)
	}
	var ids []string
	for _, m := range want.Messages {
		ids = append(ids, m.ID)
	}
	if got := b.rows("table.key-messages tbody tr"); !slices.Equal(got, ids) {
		b.fatal("key view rows %v, the API lists %v", got, ids)
	}
	if got := b.text(`tr[data-id="` + want.Head + `"] .badge.head`); got != "head" {
		t.Errorf("head %s not marked: %q", want.Head, got)
	}
	b.shot("key")
	b.do("cancel the key", chromedp.Click(chromedp.CSS("#cancel-key")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.then("keys", "confirm", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.do("nothing left", chromedp.WaitVisible(chromedp.CSS("#key-empty")))
	if l, err := api.KeyMessages(ctx, c.Route, "cust-0"); err != nil || len(l.Messages) != 0 {
		t.Errorf("after the console's cancel the API lists %+v, %v", l, err)
	}
	if m, err := api.Get(ctx, seeded[0]); err != nil || m.State != admin.StateCancelled {
		t.Errorf("%s after the key's cancel: %+v, %v", seeded[0], m, err)
	}
}
