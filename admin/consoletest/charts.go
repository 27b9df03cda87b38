package consoletest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delay-bridge/admin"
)

// ChartsConfig says which console's charts to check.
type ChartsConfig struct {
	// URL and Token of the admin server (Token may be empty: no sign-in then).
	URL, Token string
	// Routes must all show traffic: messages received, delivered (with lateness) and
	// pending while the test looks. DeadLettered lists the routes that also dead-letter.
	Routes, DeadLettered []string
	// MinPoints is how many intervals every line must show (default 3).
	MinPoints int
	// Window is the charts' window ("15m" or "1h"; default 1h).
	Window string
}

// drawn is what one chart line shows, read from its SVG path.
type drawn struct {
	Route, Chart, Series string
	Points               int
	Max                  float64
	D                    string
}

// Charts opens the console's charts page while messages flow and fails when a chart
// of a route is empty: every line of received, delivered, pending and lateness p50/p99
// must draw at least MinPoints points with a non-zero value somewhere (dead-lettered
// too for the routes in DeadLettered, and at least drawn for the others), and the
// points drawn must match GET /v1/series. It saves the page as charts.png in
// Artifacts and returns its path.
func Charts(t *testing.T, c ChartsConfig) string {
	t.Helper()
	if c.MinPoints <= 0 {
		c.MinPoints = 3
	}
	if c.Window == "" {
		c.Window = "1h"
	}
	api := admin.NewClient(c.URL, c.Token, nil)
	b := openCharts(t, c)
	// Intervals close while we look: re-render until every line has its points.
	var lines []drawn
	var missing []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		lines = b.lines()
		missing = emptyLines(lines, c)
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var seen []string
			for _, l := range lines {
				seen = append(seen, fmt.Sprintf("%s %s/%s: %d points, max %g", l.Route, l.Chart, l.Series, l.Points, l.Max))
			}
			b.fatal("charts still empty after 90 s of traffic: %v\nlines drawn: %v", missing, seen)
		}
		time.Sleep(time.Second)
		b.then("charts", "render again", chromedp.Evaluate[chromedp.Void](`window.dispatchEvent(new HashChangeEvent('hashchange'))`))
	}

	// What is drawn is what the API answers (an interval may close in between: at most
	// one point more by then).
	window, _ := time.ParseDuration(c.Window)
	s, err := api.Series(context.Background(), admin.SeriesQuery{Window: window})
	if err != nil {
		t.Fatal(err)
	}
	apiPoints := map[string]int{}
	for _, rs := range s.Routes {
		apiPoints[rs.Route] = len(rs.Points)
	}
	for _, l := range lines {
		if l.Chart == "rates" && l.Series == "received" && (l.Points > apiPoints[l.Route] || l.Points < apiPoints[l.Route]-1) {
			t.Errorf("route %s: %d points drawn, GET /v1/series has %d", l.Route, l.Points, apiPoints[l.Route])
		}
	}
	b.shot("charts")
	return b.dir + "/charts.png"
}

// openCharts signs in and opens the charts page with c's window.
func openCharts(t *testing.T, c ChartsConfig) browser {
	t.Helper()
	if c.Window == "" {
		c.Window = "1h"
	}
	b := browser{t: t, ctx: Chromium(t), dir: Artifacts(t)}
	b.do("open the console", chromedp.Navigate(c.URL+"/ui/"))
	if c.Token != "" {
		b.do("sign in", chromedp.WaitVisible(chromedp.CSS("#login")), chromedp.SendKeys(chromedp.CSS("#token"), c.Token),
			chromedp.Click(chromedp.CSS("#login-submit")))
	}
	b.page("overview")
	b.then("charts", "open the charts", chromedp.Click(chromedp.CSS(`#nav a[data-page="charts"]`)))
	if c.Window != "1h" {
		b.then("charts", "window "+c.Window, chromedp.Evaluate[chromedp.Void](`(s => { s.value = '`+c.Window+`'; s.dispatchEvent(new Event('change')); })(document.getElementById('c-window'))`))
	}
	return b
}

// Line is one chart line as the page draws it: its route, chart (rates, pending,
// lateness), series, the points drawn, the largest value and the SVG path.
type Line = drawn

// Lines opens the charts page once (URL, Token, Window of c) and returns every line it
// draws, for tests of how the page draws a given history; it saves charts-<name>.png.
func Lines(t *testing.T, c ChartsConfig, name string) []Line {
	t.Helper()
	b := openCharts(t, c)
	b.shot("charts-" + name)
	return b.lines()
}

// lines reads every chart line of the page.
func (b browser) lines() []drawn {
	b.t.Helper()
	js, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify([...document.querySelectorAll('section.route-charts svg.chart path.line')].map(p => ({
		Route: p.closest('section.route-charts').dataset.route, Chart: p.closest('svg').dataset.chart,
		Series: p.dataset.series, Points: Number(p.dataset.points), Max: Number(p.dataset.max), D: p.getAttribute('d')})))`))
	if err != nil {
		b.fatal("reading the chart lines: %v", err)
	}
	var out []drawn
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		b.t.Fatal(err)
	}
	return out
}

// emptyLines names the lines that do not show the traffic yet.
func emptyLines(lines []drawn, c ChartsConfig) []string {
	want := map[string]bool{}
	for _, r := range c.Routes {
		for _, s := range []string{"rates/received", "rates/delivered", "rates/dead_lettered", "pending/pending", "lateness/p50", "lateness/p99"} {
			want[r+" "+s] = true
		}
	}
	dead := map[string]bool{}
	for _, r := range c.DeadLettered {
		dead[r] = true
	}
	var missing []string
	seen := map[string]bool{}
	for _, l := range lines {
		key := l.Route + " " + l.Chart + "/" + l.Series
		if !want[key] {
			continue
		}
		seen[key] = true
		mustRise := l.Series != "dead_lettered" || dead[l.Route]
		switch {
		case l.Points < c.MinPoints || l.D == "":
			missing = append(missing, fmt.Sprintf("%s: %d points", key, l.Points))
		case mustRise && !(l.Max > 0):
			missing = append(missing, key+": flat at 0")
		}
	}
	for k := range want {
		if !seen[k] {
			missing = append(missing, k+": not drawn")
		}
	}
	return missing
}
