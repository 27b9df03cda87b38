package testkit

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/lua"
)

// ClaimCut is a TCP proxy in front of a real redis-server that loses the reply of one
// claim that claimed something: once armed, a connection that sends a call of the
// claim script (FCALL of the library's claim_<hash> function, or EVALSHA of its digest
// on servers without Functions) has its replies watched; the first reply chunk that
// carries marker (a message id prefix: the claim moved such a message into flight) is
// not forwarded, and both sides of that connection are closed. Redis ran the claim;
// the client sees a reset connection and never learns what it claimed. Armed for more
// than one cut, the proxy cuts the reply of the same request bytes sent again (a
// client's own retry of the call or pipeline) as well, so the client gives up on it.
// Everything else is forwarded unchanged.
type ClaimCut struct {
	Addr string // 127.0.0.1:port, for the client's redis.addrs

	target string
	marker []byte
	calls  [][]byte // "\r\n" + the claim's function name prefix or EVALSHA digest
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	armed  int    // cuts left
	cutReq []byte // the request whose reply was cut first: later cuts are of it again
	cuts   int
	closed bool
}

// StartClaimCut listens on a free 127.0.0.1 port and forwards to target (a Redis
// address). marker is what identifies a claimed message in a claim's reply (an id
// prefix of the test's messages). The proxy is closed at the end of the test.
func StartClaimCut(t testing.TB, target, marker string) *ClaimCut {
	t.Helper()
	lib, err := lua.NewLibrary("delaybridge", lua.Scripts)
	if err != nil {
		t.Fatalf("claimcut: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("claimcut: listen: %v", err)
	}
	p := &ClaimCut{Addr: ln.Addr().String(), target: target, marker: []byte(marker), ln: ln,
		conns: map[net.Conn]struct{}{},
		calls: [][]byte{[]byte("\r\nclaim_"), []byte("\r\n" + redis.NewScript(lib.Eval("claim")).Hash() + "\r\n")}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Arm makes the proxy cut the next claim reply that carries the marker, then the
// replies of the same request sent again, times cuts in all.
func (p *ClaimCut) Arm(times int) {
	p.mu.Lock()
	p.armed, p.cutReq = times, nil
	p.mu.Unlock()
}

// Cuts is how many claim replies the proxy lost.
func (p *ClaimCut) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

func (p *ClaimCut) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
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
		p.mu.Unlock()
		cc := &cutConn{p: p, client: c, server: s}
		p.wg.Add(2)
		go cc.requests()
		go cc.replies()
	}
}

// cutConn is one forwarded connection. req is what the client sent since the last
// reply bytes: the replies that follow, until the client writes again (go-redis reads
// every reply of a call or pipeline before it reuses the connection), answer it.
type cutConn struct {
	p              *ClaimCut
	client, server net.Conn

	mu      sync.Mutex
	req     []byte
	replied bool // reply bytes came after req: the client's next write starts a new req
}

// requests forwards client to server, gathering each request.
func (c *cutConn) requests() {
	defer c.p.wg.Done()
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			c.mu.Lock()
			if c.replied {
				c.req, c.replied = c.req[:0], false
			}
			c.req = append(c.req, buf[:n]...)
			c.mu.Unlock()
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replies forwards server to client, except the claim reply the armed proxy cuts.
func (c *cutConn) replies() {
	defer c.p.wg.Done()
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			if c.cut(buf[:n]) {
				return
			}
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut reports whether reply answers a claim and carries the marker while the proxy is
// armed (after the first cut: answers the same request again); it counts the cut.
func (c *cutConn) cut(reply []byte) bool {
	c.mu.Lock()
	c.replied = true
	req := append([]byte(nil), c.req...)
	c.mu.Unlock()
	if !c.p.holdsClaim(req) || !bytes.Contains(reply, c.p.marker) {
		return false
	}
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.p.armed == 0 || (c.p.cutReq != nil && !bytes.Equal(req, c.p.cutReq)) {
		return false
	}
	if c.p.cutReq == nil {
		c.p.cutReq = req
	}
	c.p.armed--
	c.p.cuts++
	return true
}

func (p *ClaimCut) holdsClaim(b []byte) bool {
	for _, call := range p.calls {
		if bytes.Contains(b, call) {
			return true
		}
	}
	return false
}

func (c *cutConn) close() {
	_ = c.client.Close()
	_ = c.server.Close()
	c.p.mu.Lock()
	delete(c.p.conns, c.client)
	delete(c.p.conns, c.server)
	c.p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the forwarding
// goroutines.
func (p *ClaimCut) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}
