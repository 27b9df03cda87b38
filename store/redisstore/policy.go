package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/observe"
)

// The eviction policy check (health.go): every primary's maxmemory-policy, read with
// CONFIG GET, or from INFO memory where CONFIG is renamed or refused (managed services).

const (
	policyNoEviction = "noeviction"
	// checkTimeout bounds one Check (every primary is asked concurrently).
	checkTimeout = 5 * time.Second
)

// nodePolicy is what the last check read from one primary.
type nodePolicy struct {
	policy string // observe.PolicyUnknown when neither CONFIG GET nor INFO memory told
	why    string // unknown: what they answered
}

// nodeReport is what one check read from one primary: policy "" when the node did not
// answer (a transient failure: what was known stays); memory "above" or "below"
// maxmemory when INFO memory was read, "" otherwise.
type nodeReport struct {
	nodePolicy
	memory string
}

// Check reads the maxmemory-policy of every primary (Redis Cluster: every master;
// Sentinel: the current master; standalone: the server) and, for a node that refused a
// write for lack of memory, whether it is below maxmemory again. It logs changes and
// sets the RedisPolicies metric. A Check within MinInterval of the previous one does
// nothing, so it can run on every ownership round without hammering Redis.
func (h *Health) Check(ctx context.Context) {
	if !h.checking.TryLock() {
		return
	}
	defer h.checking.Unlock()
	now := h.opt.Clock.Now()
	if !h.lastCheck.IsZero() && now.Sub(h.lastCheck) < h.opt.MinInterval {
		return
	}
	h.lastCheck = now
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	full := h.fullNodes()
	reports, err := h.readAll(ctx, full)
	if err != nil {
		if ctx.Err() == nil {
			h.opt.Logger.Debug("redis policy check: listing the primaries failed", "err", err)
		}
		return
	}
	for node, r := range reports {
		if full[node] && r.memory == "below" {
			h.leaveFull(node, "INFO memory shows used memory below maxmemory")
		}
	}
	h.update(reports)
}

// readAll asks every primary, concurrently.
func (h *Health) readAll(ctx context.Context, full map[string]bool) (map[string]nodeReport, error) {
	out := map[string]nodeReport{}
	cc, ok := h.rdb.(*redis.ClusterClient)
	if !ok {
		node := nodeHook{h: h, addr: clientAddr(h.rdb), sentinel: h.opt.MasterName != ""}
		r := readNode(ctx, h.rdb, len(full) > 0)
		out[node.node()] = r // named after the call: it may have dialed the master
		return out, nil
	}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		r := readNode(ctx, c, full[c.Options().Addr])
		mu.Lock()
		out[c.Options().Addr] = r
		mu.Unlock()
		return nil
	})
	return out, err
}

func clientAddr(rdb redis.UniversalClient) string {
	if c, ok := rdb.(*redis.Client); ok {
		return c.Options().Addr
	}
	return ""
}

// readNode reads one primary's policy (CONFIG GET, else INFO memory) and, with probe (it
// refused a write for lack of memory), whether it is above maxmemory (INFO memory): one
// command per primary in the usual case.
func readNode(ctx context.Context, c redis.Cmdable, probe bool) nodeReport {
	var r nodeReport
	cfg, cerr := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if cerr != nil && transientRedis(cerr) {
		return nodeReport{} // not answering: nothing learnt
	}
	if p := cfg["maxmemory-policy"]; cerr == nil && p != "" {
		r.policy = p
	}
	if r.policy != "" && !probe {
		return r
	}
	info, ierr := c.Info(ctx, "memory").Result()
	if ierr != nil && transientRedis(ierr) && r.policy == "" {
		return nodeReport{}
	}
	fields := infoFields(info)
	if r.policy == "" {
		r.policy = fields["maxmemory_policy"]
	}
	if r.policy == "" {
		r.policy = observe.PolicyUnknown
		r.why = fmt.Sprintf("CONFIG GET maxmemory-policy: %s; INFO memory: %s", answer(cerr, "no value"), answer(ierr, "no maxmemory_policy field"))
	}
	if ierr == nil {
		r.memory = memoryState(fields)
	}
	return r
}

func answer(err error, empty string) string {
	if err != nil {
		return err.Error()
	}
	return empty
}

// memoryState applies Redis's own rule: a write is refused while used memory, less
// what does not count (replication and AOF buffers), is above maxmemory (0 = none).
func memoryState(f map[string]string) string {
	maxmem, err1 := strconv.ParseInt(f["maxmemory"], 10, 64)
	used, err2 := strconv.ParseInt(f["used_memory"], 10, 64)
	if err1 != nil || err2 != nil {
		return ""
	}
	notCounted, _ := strconv.ParseInt(f["mem_not_counted_for_evict"], 10, 64)
	if maxmem > 0 && used-notCounted > maxmem {
		return "above"
	}
	return "below"
}

// infoFields parses an INFO reply's "name:value" lines.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// evicts reports whether a policy lets Redis delete keys.
func evicts(policy string) bool { return policy != policyNoEviction && policy != observe.PolicyUnknown }

// update records the policies read, forgets nodes that are no longer primaries, logs
// every change (see logChange) and sets the metric.
func (h *Health) update(reports map[string]nodeReport) {
	h.mu.Lock()
	complete := true
	for node, r := range reports {
		if r.policy == "" {
			if _, ok := h.nodes[node]; !ok {
				complete = false
			}
			continue
		}
		prev, had := h.nodes[node]
		h.nodes[node] = r.nodePolicy
		h.logChange(node, prev, had, r.nodePolicy)
	}
	for node := range h.nodes {
		if _, ok := reports[node]; !ok {
			delete(h.nodes, node)
		}
	}
	var gone []string
	for node := range h.full {
		if _, ok := reports[node]; !ok {
			gone = append(gone, node)
		}
	}
	h.checked = h.checked || complete
	policies := make(map[string]string, len(h.nodes))
	for node, p := range h.nodes {
		policies[node] = p.policy
	}
	h.mu.Unlock()
	for _, node := range gone {
		h.leaveFull(node, "no longer a primary")
	}
	h.opt.Observer.RedisPolicies(policies)
}

// logChange logs a node's policy when it starts or stops being a problem (called with
// h.mu held): an evicting policy is an error (a warning, once per node and policy, with
// AllowEviction), back to noeviction is info, an unreadable policy a warning once per
// node.
func (h *Health) logChange(node string, prev nodePolicy, had bool, cur nodePolicy) {
	log := h.opt.Logger
	changed := !had || prev.policy != cur.policy
	switch {
	case !changed:
	case evicts(cur.policy) && h.opt.AllowEviction:
		if h.once(node, cur.policy) {
			log.Warn("Redis may evict pending messages (its maxmemory-policy is not noeviction); ready anyway because redis.allow_eviction is set: an evicted message is lost without a trace",
				"node", node, "policy", cur.policy)
		}
	case evicts(cur.policy):
		log.Error("Redis may evict pending messages: its maxmemory-policy is not noeviction; not ready until it is",
			"node", node, "policy", cur.policy, "fix", policyFix)
	case cur.policy == observe.PolicyUnknown:
		if h.once(node, cur.policy) {
			log.Warn("cannot read Redis's maxmemory-policy (CONFIG GET and INFO memory): the bridge cannot tell whether Redis may evict pending messages; make sure it is noeviction",
				"node", node, "err", cur.why)
		}
	case had && evicts(prev.policy):
		log.Info("Redis's maxmemory-policy is noeviction again: pending messages are safe from eviction",
			"node", node, "policy", cur.policy, "was", prev.policy)
	}
}

const policyFix = "CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf (or the service's parameter group); or set redis.allow_eviction: true to accept losing messages"

func (h *Health) once(node, policy string) bool {
	k := node + "\x00" + policy
	if h.warned[k] {
		return false
	}
	h.warned[k] = true
	return true
}

// PolicyCheck says whether Redis's eviction policy lets the bridge be ready: err names
// each primary whose policy evicts (unless AllowEviction), with the fix, or says the
// policy was not read yet; note, with a nil err, says what passed with a caveat (an
// allowed evicting policy, a policy that could not be read).
func (h *Health) PolicyCheck() (note string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.checked {
		return "", errors.New("Redis's maxmemory-policy not checked yet")
	}
	var bad, notes []string
	for _, node := range slices.Sorted(maps.Keys(h.nodes)) {
		p := h.nodes[node]
		switch {
		case evicts(p.policy) && !h.opt.AllowEviction:
			bad = append(bad, fmt.Sprintf("maxmemory-policy %s on %s", p.policy, node))
		case evicts(p.policy):
			notes = append(notes, fmt.Sprintf("maxmemory-policy %s on %s, allowed by redis.allow_eviction: an evicted message is lost", p.policy, node))
		case p.policy == observe.PolicyUnknown:
			notes = append(notes, fmt.Sprintf("maxmemory-policy on %s unknown (%s): not checked", node, p.why))
		}
	}
	if len(bad) > 0 {
		return "", fmt.Errorf("%s: Redis may evict pending messages; fix: %s", strings.Join(bad, ", "), policyFix)
	}
	return strings.Join(notes, "; "), nil
}
