package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Redis as a database. Once the source is acknowledged Redis holds the only copy of a
// pending message, so two states of Redis matter beyond "reachable":
//
//   - an eviction policy (any maxmemory-policy but noeviction) lets Redis delete keys
//     when it reaches maxmemory: messages vanish without a trace. Health reads the
//     policy of every primary at each Check (policy.go) and reports it for /readyz.
//   - a full Redis (noeviction at maxmemory) refuses every write with OOM: nothing is
//     lost (the commands did nothing and are retried), but nothing is parked either.
//     Health watches every reply of the client (a go-redis hook on each node) and
//     reports a node full from its first OOM refusal until a write to it succeeds or
//     its INFO memory shows it below maxmemory again.

// HealthOptions configure a Health. Zero values take the defaults.
type HealthOptions struct {
	// AllowEviction (redis.allow_eviction) accepts an evicting policy: the check passes,
	// saying so, and each node and policy is warned about once instead.
	AllowEviction bool
	// MasterName is the Sentinel master name when the client is a Sentinel failover
	// client ("" otherwise): the node is then named by the address it connected to.
	MasterName string
	// MinInterval: a Check sooner than this after the previous one does nothing (the
	// ownership round that calls it comes in quick succession during a failover).
	// Default 1 s.
	MinInterval time.Duration
	Observer    observe.Observer // default observe.Nop
	Logger      *slog.Logger     // default slog.Default()
	Clock       clock.Clock      // default clock.Real
}

// Health is Redis's state as a database (see above), for /readyz, the metrics
// (observe.Observer: RedisPolicies, RedisOOM) and the log. Safe for concurrent use.
type Health struct {
	rdb redis.UniversalClient
	opt HealthOptions

	checking  sync.Mutex // one Check at a time
	lastCheck time.Time  // under checking

	mu      sync.Mutex
	checked bool                  // every primary's policy has been read (or found unreadable)
	nodes   map[string]nodePolicy // by node address
	warned  map[string]bool       // node + "\x00" + policy warned about once
	full    map[string]fullState  // nodes that refused a write for lack of memory
	anyFull atomic.Bool           // len(full) > 0, read on every reply

	master atomic.Pointer[string] // Sentinel: the address of the newest connection
}

// fullState is one node refusing writes: since when, and the last refusal.
type fullState struct {
	since time.Time
	err   string
}

// NewHealth watches rdb's replies and returns the Health that Check keeps current. It
// must be called before rdb sends its first command: on Redis Cluster the hook is added
// to each node client as the client creates it.
func NewHealth(rdb redis.UniversalClient, opt HealthOptions) *Health {
	if opt.MinInterval <= 0 {
		opt.MinInterval = time.Second
	}
	if opt.Observer == nil {
		opt.Observer = observe.Nop{}
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	h := &Health{rdb: rdb, opt: opt, nodes: map[string]nodePolicy{}, warned: map[string]bool{}, full: map[string]fullState{}}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(nodeHook{h: h, addr: n.Options().Addr}) })
	case *redis.Client:
		c.AddHook(nodeHook{h: h, addr: c.Options().Addr, sentinel: opt.MasterName != ""})
	}
	return h
}

// WriteCheck is nil while no Redis node refuses writes for lack of memory, and
// otherwise names each full node, since when and Redis's own words (for /readyz).
func (h *Health) WriteCheck() error {
	if !h.anyFull.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for _, node := range slices.Sorted(maps.Keys(h.full)) {
		f := h.full[node]
		parts = append(parts, fmt.Sprintf("Redis %s refuses writes since %s: %s", node, f.since.UTC().Format(time.RFC3339), f.err))
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("%s; parks, claims and acknowledgements wait and are retried (nothing is lost) until memory frees: raise maxmemory or free memory",
		strings.Join(parts, "; "))
}

// enterFull records n OOM refusals by node, the last with err.
func (h *Health) enterFull(node string, err error, n int) {
	h.opt.Observer.RedisOOM(n)
	h.mu.Lock()
	_, was := h.full[node]
	f := h.full[node]
	if !was {
		f.since = h.opt.Clock.Now()
	}
	f.err = err.Error()
	h.full[node] = f
	h.anyFull.Store(true)
	h.mu.Unlock()
	if !was {
		h.opt.Logger.Error("Redis is out of memory and refuses writes: parks, claims and acknowledgements wait and are retried (nothing is lost) until memory frees; raise maxmemory or free memory",
			"node", node, "err", err)
	}
}

// leaveFull clears node's full state (why: what showed that it accepts writes again).
func (h *Health) leaveFull(node, why string) {
	h.mu.Lock()
	f, was := h.full[node]
	delete(h.full, node)
	h.anyFull.Store(len(h.full) > 0)
	h.mu.Unlock()
	if was {
		h.opt.Logger.Info("Redis accepts writes again", "node", node, "why", why, "full_for", h.opt.Clock.Now().Sub(f.since).Round(time.Millisecond))
	}
}

// fullNodes lists the nodes refusing writes.
func (h *Health) fullNodes() map[string]bool {
	if !h.anyFull.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]bool, len(h.full))
	for node := range h.full {
		out[node] = true
	}
	return out
}

// denyOOM are the plain commands the bridge sends that Redis refuses while it is out of
// memory (they carry its denyoom flag): one of them succeeding shows the node accepts
// writes. Script calls are not among them: a script that writes nothing (an empty claim)
// succeeds on a full Redis too.
var denyOOM = map[string]bool{
	"set": true, "setnx": true, "setex": true, "psetex": true, "append": true, "incr": true, "incrby": true,
	"hset": true, "hsetnx": true, "hmset": true, "hincrby": true, "zadd": true, "sadd": true,
	"rpush": true, "lpush": true, "xadd": true,
}

// observe looks at replies node gave: OOM refusals enter the full state, a write that
// succeeded leaves it.
func (h *Health) observe(node string, cmds ...redis.Cmder) {
	oom, wrote := 0, false
	var last error
	for _, c := range cmds {
		err := c.Err()
		switch {
		case err == nil:
			wrote = wrote || (h.anyFull.Load() && denyOOM[c.Name()])
		case isOOM(err):
			oom++
			last = err
		}
	}
	switch {
	case oom > 0:
		h.enterFull(node, last, oom)
	case wrote:
		h.leaveFull(node, "a write succeeded")
	}
}

// nodeHook is the redis.Hook on one node's client.
type nodeHook struct {
	h        *Health
	addr     string
	sentinel bool // a Sentinel failover client: its connections go to the current master
}

func (k nodeHook) node() string {
	if !k.sentinel {
		return k.addr
	}
	if a := k.h.master.Load(); a != nil {
		return *a
	}
	return "master " + k.h.opt.MasterName
}

func (k nodeHook) DialHook(next redis.DialHook) redis.DialHook {
	if !k.sentinel {
		return next
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			// After a failover the client closes its connections to the old master,
			// so the newest connection is to the current one.
			a := conn.RemoteAddr().String()
			k.h.master.Store(&a)
		}
		return conn, err
	}
}

func (k nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		k.h.observe(k.node(), cmd)
		return err
	}
}

func (k nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		k.h.observe(k.node(), cmds...)
		return err
	}
}
