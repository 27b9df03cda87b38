// Package consoletest drives the web console (/ui/) of a running admin server in a real
// headless Chromium (the Debian package chromium), from Go through chromedp: sign in,
// overview, browse with paging, message detail, cancel, a bulk job with its dry-run
// preview, dead letters (Run); and the charts page while messages flow (Charts). It
// asserts what the page shows against what the API answers, and saves screenshots
// under $ARTIFACTS_DIR/console (default a temporary directory).
// The server, and so the backend behind it, is the caller's: admin's tests run it on
// an in-memory model of the contract, app's on the real bridge with Redis.
package consoletest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium starts a headless Chromium for the test, offline (no calls to Google), and
// returns the context of its tab; it stops when the test ends. A missing browser fails
// the test (it is never skipped). $CHROMIUM overrides the binary.
func Chromium(t *testing.T) context.Context {
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

// Artifacts is where screenshots go: $ARTIFACTS_DIR/console, else a temporary directory.
func Artifacts(t *testing.T) string {
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
