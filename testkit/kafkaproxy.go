package testkit

import (
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

// StartKafkaBehindProxy is StartKafka with a tcpproxy in front of the broker: the broker
// advertises the proxy's address, so every client connection (bootstrap and the ones
// the metadata points to) goes through it and a test can freeze, cut or refuse them.
// It returns the bootstrap address (the proxy's).
func StartKafkaBehindProxy(t testing.TB, partitions int, topics ...string) (addr string, c *kfake.Cluster, p *tcpproxy.Proxy) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testutil: listen for kfake: %v", err)
	}
	p = tcpproxy.Start(t, ln.Addr().String())
	proxyAddr, err := net.ResolveTCPAddr("tcp", p.Addr)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	used := false
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(partitions),
		kfake.ListenFn(func(string, string) (net.Listener, error) {
			if used {
				return net.Listen("tcp", "127.0.0.1:0")
			}
			used = true
			return advertised{Listener: ln, addr: proxyAddr}, nil
		})}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	c, err = kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testutil: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return p.Addr, c, p
}

// advertised is a listener that reports another address (the proxy's) as its own,
// which is what kfake puts in its metadata answers.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }
