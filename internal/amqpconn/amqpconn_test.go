package amqpconn_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fast(u string) amqpconn.Config {
	return amqpconn.Config{URL: u, Name: "amqpconn-test", MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
}

func newManager(t *testing.T, cfg amqpconn.Config) *amqpconn.Manager {
	t.Helper()
	m, err := amqpconn.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestChannelAndReconnectAfterCut(t *testing.T) {
	base := testkit.RequireRabbitMQ(t)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	m := newManager(t, fast(p.URL(base)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	ch, err := m.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Connected() {
		t.Fatal("Connected() = false after a channel was opened")
	}
	q := testkit.Uniq(t, "amqpconn")
	if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	deadline := time.Now().Add(5 * time.Second)
	for !ch.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !ch.IsClosed() {
		t.Fatal("channel still open after the connection was cut")
	}
	ch2, err := m.Channel(ctx)
	if err != nil {
		t.Fatalf("no channel after reconnect: %v", err)
	}
	if _, err := ch2.QueueDeclare(q, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	m.CloseChannel(ch2, time.Second)
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := m.Channel(ctx); !errors.Is(err, amqpconn.ErrClosed) {
		t.Fatalf("Channel after Close: %v, want ErrClosed", err)
	}
}

func TestDownThenUpAndCtx(t *testing.T) {
	base := testkit.RequireRabbitMQ(t)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	p.SetDown(true)
	m := newManager(t, fast(p.URL(base)))

	// While the broker is unreachable, Channel keeps dialing until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	start := time.Now()
	_, err := m.Channel(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Channel while down: %v, want deadline exceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second { // 300 ms ctx; generous for a loaded machine
		t.Fatalf("Channel returned %v after its ctx ended", took)
	}
	if m.LastError() == nil {
		t.Fatal("LastError() = nil after failed dials")
	}

	// It connects by itself once the broker is back.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		time.Sleep(200 * time.Millisecond)
		p.SetDown(false)
	}()
	ch, err := m.Channel(ctx)
	if err != nil {
		t.Fatalf("Channel after the broker came back: %v", err)
	}
	m.CloseChannel(ch, time.Second)
}

func TestCloseAbortsWaitingCallers(t *testing.T) {
	base := testkit.RequireRabbitMQ(t)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	p.SetDown(true)
	m := newManager(t, fast(p.URL(base)))
	errc := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := m.Channel(context.Background())
			errc <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case err := <-errc:
			if !errors.Is(err, amqpconn.ErrClosed) {
				t.Fatalf("waiting caller got %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a caller waiting for a connection did not return after Close")
		}
	}
}

func TestBadCredentialsArePermanent(t *testing.T) {
	base := testkit.RequireRabbitMQ(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("guest", "definitely-not-the-password")
	cfg := fast(u.String())
	cfg.MaxAuthRefusals = 2 // RabbitMQ answers each refused login after a ~3 s delay
	m := newManager(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = m.Channel(ctx)
	if !fault.IsPermanent(err) || !strings.Contains(err.Error(), "2 handshakes in a row") {
		t.Fatalf("bad credentials: %v, want a permanent error after 2 refusals", err)
	}
}

// TestCutDuringLoginIsNotPermanent: a socket closed during the login looks like a
// credentials refusal to amqp091-go; fewer than MaxAuthRefusals in a row are retried.
func TestCutDuringLoginIsNotPermanent(t *testing.T) {
	base := testkit.RequireRabbitMQ(t)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	m := newManager(t, fast(p.URL(base)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.KillHandshakes(2)
	ch, err := m.Channel(ctx)
	if err != nil {
		t.Fatalf("after 2 cut logins: %v, want a channel", err)
	}
	m.CloseChannel(ch, time.Second)

	m2 := newManager(t, fast(p.URL(base)))
	p.KillHandshakes(3)
	if _, err := m2.Channel(ctx); !fault.IsPermanent(err) {
		t.Fatalf("after 3 refused logins: %v, want a permanent error", err)
	}
}

// TestCutAtOpenIsNotARefusal: a socket closed at connection.open, after the broker
// accepted the login, is a cut however often it happens (RabbitMQ refuses a vhost with
// a 530 reply), never counted as a refused login.
func TestCutAtOpenIsNotARefusal(t *testing.T) {
	base := testkit.RequireRabbitMQ(t)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	m := newManager(t, fast(p.URL(base)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.KillAtOpen(5) // more than MaxAuthRefusals (3)
	ch, err := m.Channel(ctx)
	if err != nil {
		t.Fatalf("after 5 cuts at connection.open: %v, want a channel", err)
	}
	m.CloseChannel(ch, time.Second)
}

// TestBadConfigIsPermanent: New refuses what no dial can fix. (A missing amqp.tls file
// is refused where the *tls.Config is built from it: app's
// TestAMQPConnConfigTLSFiles.)
func TestBadConfigIsPermanent(t *testing.T) {
	for name, cfg := range map[string]amqpconn.Config{
		"bad scheme":       {URL: "http://nope"},
		"no url":           {},
		"negative backoff": {URL: "amqp://127.0.0.1:5672/", MinBackoff: -time.Second},
	} {
		if _, err := amqpconn.New(cfg); !fault.IsPermanent(err) {
			t.Errorf("%s: New = %v, want a permanent error", name, err)
		}
	}
	// TLS set: an amqp:// URL is dialed as amqps:// (New does not dial).
	m := newManager(t, amqpconn.Config{URL: "amqp://u@127.0.0.1:5671/", TLS: &tls.Config{MinVersion: tls.VersionTLS12}})
	if m.Username() != "u" {
		t.Errorf("Username = %q", m.Username())
	}
}

func TestDoReturnsOnCtx(t *testing.T) {
	testkit.RequireRabbitMQ(t)
	m := newManager(t, fast(testkit.AMQPURL()))
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := m.Do(ctx, func() error { <-release; return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do: %v", err)
	}
	close(release) // Close waits for the helper goroutine
}

// TestRedialWaitsOnTheClock: after a failed dial the next one waits the backoff on the
// injected clock, so it happens only once that clock has moved on.
func TestRedialWaitsOnTheClock(t *testing.T) {
	base := testkit.RequireRabbitMQ(t)
	p := tcpproxy.Start(t, "127.0.0.1:5672")
	p.SetDown(true)
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	m := newManager(t, amqpconn.Config{URL: p.URL(base), Name: t.Name(), MinBackoff: time.Second, MaxBackoff: time.Second, Clock: fake})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		ch  *amqp091.Channel
		err error
	}
	done := make(chan result, 1)
	go func() {
		ch, err := m.Channel(ctx)
		done <- result{ch, err}
	}()
	for fake.Timers() == 0 { // the first dial failed; the redial waits on the clock
		select {
		case r := <-done:
			t.Fatalf("Channel returned (%v) while the broker was down", r.err)
		case <-ctx.Done():
			t.Fatal("no redial wait armed on the injected clock")
		case <-time.After(time.Millisecond):
		}
	}
	if m.LastError() == nil {
		t.Fatal("LastError() = nil after a failed dial")
	}
	p.SetDown(false)
	fake.Advance(2 * time.Second) // beyond the 1s backoff and its jitter
	r := <-done
	if r.err != nil {
		t.Fatalf("Channel after the clock moved past the backoff: %v", r.err)
	}
	m.CloseChannel(r.ch, time.Second)
}
