// Package tcpproxy is a tiny TCP forwarder for fault-injection tests: it sits between a
// client and a shared server (RabbitMQ on 127.0.0.1:5672) so a test can cut the client's
// connections, or refuse new ones for a while, without disturbing the server or other
// tests; or freeze every connection (nothing forwarded either way, as if the server
// process were stopped) and thaw it again.
package tcpproxy

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards connections accepted on Addr to a target address.
type Proxy struct {
	Addr string // 127.0.0.1:port

	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	thawed *sync.Cond // signalled when frozen turns false or the proxy closes
	conns  map[net.Conn]struct{}
	frozen bool
	down   bool
	closed bool
	cuts   int
	kill   int // the next kill connections die in the AMQP handshake
	killAt int // ... after forwarding this many client frames past the protocol header
}

// Start listens on a free 127.0.0.1 port and forwards to target. The proxy is closed at
// the end of the test.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcpproxy: listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down || p.closed {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.mu.Unlock()
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		kill, frames := p.kill > 0, p.killAt
		if kill {
			p.kill--
		}
		p.mu.Unlock()
		p.wg.Add(2)
		if kill {
			go p.killAfterFrames(s, c, frames)
		} else {
			go p.pipe(s, c)
		}
		go p.pipe(c, s)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitThawed()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.waitThawed() // a connection closed while frozen is seen closed only after the thaw
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// killAfterFrames forwards the client's 8-byte protocol header and its next frames
// client frames, then waits for the one after and closes both sides without
// forwarding it. With frames 0 that is connection.start-ok, carrying the credentials:
// to the client it looks exactly like RabbitMQ refusing the login by closing the
// socket. With frames 2 (start-ok, tune-ok) it is connection.open: a cut after the
// login was accepted.
func (p *Proxy) killAfterFrames(dst, src net.Conn, frames int) {
	defer p.wg.Done()
	if _, err := io.CopyN(dst, src, 8); err == nil {
		for range frames {
			// A frame: type (1), channel (2), payload size (4), payload, frame-end (1).
			var head [7]byte
			if _, err := io.ReadFull(src, head[:]); err != nil {
				break
			}
			size := int64(binary.BigEndian.Uint32(head[3:]))
			if _, err := dst.Write(head[:]); err != nil {
				break
			}
			if _, err := io.CopyN(dst, src, size+1); err != nil {
				break
			}
		}
		var b [1]byte
		_, _ = src.Read(b[:])
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// waitThawed blocks while the proxy is frozen (and not closed).
func (p *Proxy) waitThawed() {
	p.mu.Lock()
	for p.frozen && !p.closed {
		p.thawed.Wait()
	}
	p.mu.Unlock()
}

// Freeze stops forwarding on every connection, both ways, until Thaw: bytes already
// sent by either side wait in the proxy (and the kernel's buffers) and are delivered, in
// order, after the thaw — what a stopped (SIGSTOP) server looks like to its clients. A
// client closing its connection meanwhile is seen by the server only after the thaw,
// behind what it wrote. New connections are accepted (and frozen) meanwhile.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Thaw resumes forwarding after Freeze.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	p.frozen = false
	p.mu.Unlock()
	p.thawed.Broadcast()
}

// KillHandshakes makes the next n connections die during the AMQP login (see
// killAfterFrames).
func (p *Proxy) KillHandshakes(n int) {
	p.mu.Lock()
	p.kill, p.killAt = n, 0
	p.mu.Unlock()
}

// KillAtOpen makes the next n connections die at connection.open, after the broker
// accepted the login (see killAfterFrames).
func (p *Proxy) KillAtOpen(n int) {
	p.mu.Lock()
	p.kill, p.killAt = n, 2
	p.mu.Unlock()
}

// Cut closes every connection currently forwarded (both sides). New connections are
// accepted as before unless SetDown(true).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts++
	for c := range p.conns {
		_ = c.Close()
	}
}

// SetDown makes the proxy refuse (accept and close at once) new connections while down.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// Active is the number of client connections currently forwarded.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Close stops listening, cuts everything and waits for the forwarding goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.thawed.Broadcast()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// URL returns base (an amqp:// URL of the real server) pointed at the proxy instead.
func (p *Proxy) URL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return "amqp://guest:guest@" + p.Addr + "/"
	}
	u.Host = p.Addr
	return u.String()
}
