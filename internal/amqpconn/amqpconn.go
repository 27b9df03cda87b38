// Package amqpconn is a small reconnecting connection manager over amqp091-go, which does
// not reconnect by itself (its experimental Recovery mode is deliberately not used: it
// reopens channels under the caller's feet and restarts delivery tags at 1, so an ack for
// a delivery from before the drop would ack a different message).
//
// A Manager holds at most one live connection. Callers ask it for fresh channels with
// Channel; when the connection is gone (NotifyClose fired, or it was never up) the next
// caller dials again, waiting an exponential backoff (clock.Backoff, on the injected
// clock) between attempts. Channels are never
// recovered: a caller whose channel dies asks for a new one and rebuilds its own state
// (declarations, QoS, consumer, confirm mode), so a delivery tag is only ever used on the
// channel that issued it.
//
// Every goroutine the Manager starts (one close watcher per connection, and the helpers
// of Do) is owned by it and has stopped when Close returns.
package amqpconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// ErrClosed is returned by a Manager (and wrapped by its users) after Close.
var ErrClosed = errors.New("amqpconn: manager closed")

// Manager hands out channels on a connection it re-dials when it drops.
type Manager struct {
	cfg    Config
	url    string
	user   string
	tlsCfg *tls.Config
	log    *slog.Logger
	clk    clock.Clock

	base   context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	conn        *amqp.Connection
	connectedAt time.Time
	dialing     chan struct{} // non-nil while one caller dials; closed when it is done
	backoff     *clock.Backoff
	nextDial    time.Time
	lastErr     error
	refusals    int // consecutive handshakes that ended like a credentials refusal
	closed      bool
}

// New checks cfg (defaults filled in, then Validate) without dialing. Errors are
// permanent.
func New(cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	url, tlsCfg := cfg.dialURL()
	uri, _ := amqp.ParseURI(url) // Validate parsed it
	m := &Manager{
		cfg:     cfg,
		url:     url,
		user:    uri.Username,
		tlsCfg:  tlsCfg,
		log:     cfg.Logger.With("component", "amqpconn", "conn", cfg.Name),
		clk:     cfg.Clock,
		backoff: clock.NewBackoff(cfg.Clock, clock.BackoffPolicy{Initial: cfg.MinBackoff, Max: cfg.MaxBackoff}),
	}
	m.base, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Username is the user the manager authenticates as (from the URL). RabbitMQ rejects a
// publish whose user_id property names another user, so sinks compare against it.
func (m *Manager) Username() string { return m.user }

// Connected reports whether a connection is currently open (for readiness checks).
func (m *Manager) Connected() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conn != nil && !m.conn.IsClosed()
}

// LastError returns the error of the latest failed dial or connection loss (nil after a
// successful dial).
func (m *Manager) LastError() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastErr
}

// Connection returns the live connection, dialing (with backoff between failed
// attempts) until one is up, ctx is done, the manager is closed, or a dial fails
// permanently (marked fault.Permanent: credentials, vhost, TLS).
func (m *Manager) Connection(ctx context.Context) (*amqp.Connection, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		if m.conn != nil && !m.conn.IsClosed() {
			c := m.conn
			m.mu.Unlock()
			return c, nil
		}
		if wait := m.dialing; wait != nil {
			m.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-m.base.Done():
				return nil, ErrClosed
			}
		}
		done := make(chan struct{})
		m.dialing = done
		delay := m.nextDial.Sub(m.clk.Now())
		m.mu.Unlock()

		c, err := m.dial(ctx, delay)

		m.mu.Lock()
		m.dialing = nil
		close(done)
		switch {
		case err == nil && m.closed:
			m.mu.Unlock()
			_ = c.CloseDeadline(time.Now().Add(time.Second))
			return nil, ErrClosed
		case err == nil:
			m.conn, m.connectedAt, m.lastErr, m.refusals = c, m.clk.Now(), nil, 0
			m.watch(c)
			m.mu.Unlock()
			m.log.Debug("amqp connected")
			return c, nil
		}
		if ctx.Err() != nil || m.closed {
			m.mu.Unlock()
			if m.closed {
				return nil, ErrClosed
			}
			return nil, ctx.Err()
		}
		m.lastErr = err
		m.nextDial = m.clk.Now().Add(m.backoff.Next())
		if errors.Is(err, errRefused) {
			m.refusals++
			if m.refusals >= m.cfg.MaxAuthRefusals {
				err = fault.Permanent(fmt.Errorf("%w (%d handshakes in a row)", err, m.refusals))
				m.lastErr = err
			}
		} else {
			m.refusals = 0
		}
		retryIn := m.nextDial.Sub(m.clk.Now()) // read under mu: the close watcher writes it
		m.mu.Unlock()
		if fault.IsPermanent(err) {
			return nil, err
		}
		m.log.Warn("amqp dial failed; retrying", "err", err, "retry_in", retryIn.Round(time.Millisecond))
	}
}

// dial waits delay (the backoff) and dials once. ctx and Close abort both.
func (m *Manager) dial(ctx context.Context, delay time.Duration) (*amqp.Connection, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.base, cancel)
	defer stop()
	if err := clock.Sleep(ctx, m.clk, delay); err != nil {
		return nil, err
	}

	var mu sync.Mutex
	var raw net.Conn
	props := amqp.NewConnectionProperties()
	if m.cfg.Name != "" {
		props.SetClientConnectionName(m.cfg.Name)
	}
	acfg := amqp.Config{
		Heartbeat:  m.cfg.Heartbeat,
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: m.cfg.DialTimeout, KeepAlive: 30 * time.Second}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the TLS and AMQP handshakes; amqp091 clears it once open.
			_ = c.SetDeadline(time.Now().Add(m.cfg.DialTimeout))
			mu.Lock()
			raw = c
			mu.Unlock()
			return c, nil
		},
	}
	if m.tlsCfg != nil {
		acfg.TLSClientConfig = m.tlsCfg.Clone()
	}
	// A cancelled ctx interrupts a handshake in progress by expiring the socket deadline.
	abort := context.AfterFunc(ctx, func() {
		mu.Lock()
		if raw != nil {
			_ = raw.SetDeadline(time.Unix(1, 0))
		}
		mu.Unlock()
	})
	c, err := amqp.DialConfig(m.url, acfg)
	if !abort() {
		if err == nil {
			_ = c.Close() // the deadline is in the past: returns at once
		}
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, classify(err)
	}
	return c, nil
}

// errRefused marks a handshake that ended the way a credentials or vhost refusal does.
var errRefused = errors.New("refused")

// classify marks handshake refusals the broker stated and TLS certificate problems as
// permanent, and handshakes that ended like a refusal with errRefused.
func classify(err error) error {
	var aerr *amqp.Error
	// Only the broker's own refusal counts: amqp091-go reports a socket that closed
	// during the handshake (a cut, a load balancer reset) as a local ErrCredentials or
	// ErrVhost, which a retry fixes.
	if errors.As(err, &aerr) && aerr.Server && (aerr.Code == amqp.AccessRefused || aerr.Code == amqp.NotAllowed) {
		return fault.Permanent(fmt.Errorf("amqp handshake refused: %w", err))
	}
	if errors.Is(err, amqp.ErrSASL) {
		return fault.Permanent(fmt.Errorf("amqp handshake: %w", err))
	}
	if errors.Is(err, amqp.ErrCredentials) {
		// RabbitMQ refuses bad credentials by closing the socket (amqp091-go does not
		// advertise authentication_failure_close), which looks the same as a cut during
		// the login: permanent only after MaxAuthRefusals in a row.
		return fmt.Errorf("amqp handshake refused: %w: %w", err, errRefused)
	}
	if errors.Is(err, amqp.ErrVhost) {
		// A local ErrVhost is a socket closed at connection.open without a reply: the
		// login had been accepted, and RabbitMQ refuses a vhost with a 530 reply (the
		// server error above), so this is a cut, which a retry fixes.
		return fmt.Errorf("amqp handshake cut at connection.open: %w", err)
	}
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr x509.CertificateInvalidError
	if errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr) {
		return fault.Permanent(fmt.Errorf("amqp tls: %w", err))
	}
	return fmt.Errorf("amqp dial: %w", err)
}

// watch starts the close watcher of c. Called with m.mu held.
func (m *Manager) watch(c *amqp.Connection) {
	notify := c.NotifyClose(make(chan *amqp.Error, 1))
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		var e *amqp.Error
		select {
		case e = <-notify:
		case <-m.base.Done():
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.conn != c {
			return
		}
		m.conn = nil
		lived := m.clk.Now().Sub(m.connectedAt)
		if e != nil {
			m.lastErr = e
		} else {
			m.lastErr = errors.New("connection closed")
		}
		// A connection that lived a while resets the backoff: redial at once. One that
		// died young (server refusing us right after the handshake, say) keeps growing it.
		if lived > m.cfg.MaxBackoff {
			m.backoff.Reset()
			m.nextDial = time.Time{}
		} else {
			m.nextDial = m.clk.Now().Add(m.backoff.Next())
		}
		if !m.closed {
			m.log.Warn("amqp connection lost; will reconnect", "err", m.lastErr, "lived", lived.Round(time.Millisecond))
		}
	}()
}

// Channel opens a fresh channel on the live connection, dialing first when needed
// (see Connection). The caller owns the channel: it must not share it between
// goroutines, and closes it (CloseChannel) when done.
func (m *Manager) Channel(ctx context.Context) (*amqp.Channel, error) {
	for {
		c, err := m.Connection(ctx)
		if err != nil {
			return nil, err
		}
		var ch *amqp.Channel
		err = m.Do(ctx, func() error {
			var err error
			ch, err = c.Channel()
			return err
		})
		if err == nil {
			return ch, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if c.IsClosed() || errors.Is(err, amqp.ErrClosed) {
			m.forget(c)
			continue // the connection died under us: dial again
		}
		return nil, fmt.Errorf("amqp open channel: %w", err)
	}
}

// forget drops c if it is still the current connection (its watcher may lag behind).
func (m *Manager) forget(c *amqp.Connection) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == c {
		m.conn = nil
	}
}

// Do runs fn, a blocking amqp091 call that does not take a context (QueueDeclare, Qos,
// Confirm, Channel.Close...), and returns its error, or ctx's error as soon as ctx is
// done. In that case fn keeps running in a goroutine owned by the manager; it returns
// when the server answers or the channel or connection closes, and Close waits for it.
func (m *Manager) Do(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.wg.Add(1)
	m.mu.Unlock()
	res := make(chan error, 1)
	go func() {
		defer m.wg.Done()
		res <- fn()
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CloseChannel closes ch (which returns unacknowledged deliveries to their queue),
// waiting at most grace for the server's close-ok; the close goes on in the background
// (owned by the manager) if the server is slow.
func (m *Manager) CloseChannel(ch *amqp.Channel, grace time.Duration) {
	if ch == nil || ch.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	_ = m.Do(ctx, ch.Close)
}

// Close closes the connection and waits for every goroutine the manager started.
// Channels handed out are closed with the connection. Close is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	c := m.conn
	m.conn = nil
	m.mu.Unlock()
	m.cancel()
	var err error
	if c != nil && !c.IsClosed() {
		err = c.CloseDeadline(time.Now().Add(2 * time.Second))
		if errors.Is(err, amqp.ErrClosed) {
			err = nil
		}
	}
	m.wg.Wait()
	return err
}
