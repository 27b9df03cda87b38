package admin

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
)

// The web console in a real headless Chromium (the Debian package), driven from Go:
// sign in, overview, browse with paging, message detail, cancel, a bulk job with its
// dry-run preview, dead letters. Screenshots go to $ARTIFACTS_DIR (default a temporary
// directory). The backend is a parameter of runConsole: today the in-memory model of
// the contract (liveFake); the same scenario runs against any Backend that can
// schedule, browse and run jobs.

// liveFake is the fake with counts and next due computed from its messages, as a
// backend that keeps them incrementally reports them.
type liveFake struct{ *fakeBackend }

func (f liveFake) counts() (map[string]*Counts, map[string]int64) {
	c, next := map[string]*Counts{}, map[string]int64{}
	for _, m := range f.msgs {
		if m.Route == "" {
			continue
		}
		if c[m.Route] == nil {
			c[m.Route] = &Counts{}
		}
		switch m.State {
		case StatePending:
			c[m.Route].Pending++
			if n := next[m.Route]; n == 0 || m.DueAt < n {
				next[m.Route] = m.DueAt
			}
		case StateInflight:
			c[m.Route].Inflight++
		case StateDead:
			c[m.Route].Dead++
		}
	}
	return c, next
}

func (f liveFake) Stats(context.Context) (Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, _ := f.counts()
	st := Stats{Routes: map[string]Counts{}, Instance: "bridge-0", Members: []string{"bridge-0", "bridge-1"}, Shards: []ShardStats{}}
	for r, n := range c {
		st.Routes[r] = *n
		st.Totals.Pending += n.Pending
		st.Totals.Inflight += n.Inflight
		st.Totals.Dead += n.Dead
	}
	return st, nil
}

func (f liveFake) Routes(context.Context) (RoutesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, next := f.counts()
	out := RoutesResponse{Instance: "bridge-0"}
	for _, r := range []struct{ name, src, state, target string }{
		{"billing", "amqp:billing.delay", "consuming", "billing"},
		{"orders", "kafka:orders.delay", "consuming", "orders"},
	} {
		rs := RouteStatus{Name: r.name, Ready: true, Counts: c[r.name], NextDue: next[r.name],
			Ingress: IngressStatus{Source: r.src, State: r.state, Lag: 0},
			Egress:  EgressStatus{Broker: strings.Split(r.src, ":")[0], Target: r.target, Reachable: true}}
		if rs.Counts == nil {
			rs.Counts = &Counts{}
		}
		out.Routes = append(out.Routes, rs)
	}
	return out, nil
}

func TestConsole(t *testing.T) {
	f := newFake()
	f.msgs = map[string]*Message{}
	f.now = time.Now().Truncate(time.Second)
	for i, reason := range []string{"publish: unroutable", "bad_delay"} {
		id := fmt.Sprintf("orders.delay/0/%d", 90+i)
		f.msgs[id] = &Message{ID: id, State: StateDead, Route: "orders", Reason: reason, Attempt: 10,
			DueAt: f.now.Add(-time.Hour).UnixMilli(), DeadAt: f.now.Add(-time.Duration(30-i) * time.Minute).UnixMilli(),
			Source: "orders.delay", SourceBroker: "kafka", RawPayload: []byte(`{"order":1}`), PayloadSize: 11}
	}
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: LatenessMetric,
		Buckets: []float64{0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1}}, []string{"route"})
	reg.MustRegister(h)
	for i := range 200 {
		h.WithLabelValues("orders").Observe(0.0008 + float64(i%10)*0.0002)
		h.WithLabelValues("billing").Observe(0.002 + float64(i%20)*0.0005)
	}
	runConsole(t, liveFake{f}, reg)
}

// chromium starts a headless Chromium for the test, offline (no calls to Google).
func chromium(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		t.Fatal("no chromium on PATH: the console test needs a real browser; install the Debian packages " +
			"(apt-get install -y chromium chromium-driver) or set CHROMIUM to its path")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute) // a hung browser fails the test
	t.Cleanup(func() { cancelTimeout(); cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1440, 900)); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// artifacts is where screenshots go.
func artifacts(t *testing.T) string {
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

// step bounds one step, so a selector that never appears fails fast.
func (b browser) step() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, 20*time.Second)
}

// fatal fails the test with what the page shows.
func (b browser) fatal(format string, args ...any) {
	b.t.Helper()
	html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.hash + "\n" + document.querySelector('main').outerHTML`))
	b.t.Fatalf(format+"\npage: %.3000s", append(args, html)...)
}

func (b browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fatal("%s: %v", what, err)
	}
}

func (b browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.fatal("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// rows returns the data-id of every row of the table in the view.
func (b browser) rows(sel string) []string {
	b.t.Helper()
	ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll(`+"`"+sel+"`"+`)].map(r => r.dataset.id || r.dataset.route)`))
	if err != nil {
		b.t.Fatalf("rows %s: %v", sel, err)
	}
	return ids
}

// page waits until the view of page has rendered.
func (b browser) page(name string) {
	b.t.Helper()
	b.do("waiting for page "+name, chromedp.WaitVisible(chromedp.CSS(`#view[data-page="`+name+`"][aria-busy="false"]`)))
}

// then runs actions that make the console render again and waits for the new render
// of page name.
func (b browser) then(name, what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(document.querySelector('#view').dataset.render || '0')`))
	if err != nil {
		b.fatal("render count: %v", err)
	}
	b.do(what, actions...)
	b.do(what+": waiting for page "+name, chromedp.Poll[chromedp.Void](
		`(v => v && v.dataset.page === '`+name+`' && v.getAttribute('aria-busy') === 'false' && Number(v.dataset.render) > `+n+`)(document.querySelector('#view'))`))
}

func (b browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// serve runs the admin server for backend on a free port until the test ends.
func serve(t *testing.T, backend Backend, g prometheus.Gatherer, token string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Options{Backend: backend, Token: token, Gatherer: g, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}
