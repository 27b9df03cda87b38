package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/lua"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/store/storetest"
	"github.com/delaybridge/delay-bridge/testkit"
)

// Every script states its keys in its header (`-- KEYS[i] <name> ...`, lua/lua.go), and
// the Go side builds the key lists it passes. TestScriptKeysMatchHeaders records the keys
// of every script call the store makes while the conformance suite runs (plain and with
// the cold tier), plus membership's partition leases, and checks each call against the
// header of the script it runs: as many keys as the header documents (the slot guard
// the store appends after a script's own keys, slotguard.go, is not one of them), and
// each key's role, the part of its name after the hash tag ("P:{C:n}:due" -> "due"),
// matching the header's name for that index.
//
// Header names: a plain name matches a role equal to it or ending in ":<name>" (a Kafka
// partition lease's "<topic>:<partition>:owner" is an owner); "a|b" matches either;
// "<...>" stands for any text ("job:<id>"). "KEYS[a..b] <script>'s keys" takes those
// indices of another script's header (a wrapper and the script it calls), and
// "KEYS[n..] <name>" is a tail of any length whose keys all match name.

// notCalledDirectly are the scripts of lua.Scripts the Go side never calls by
// themselves, with the reason. Each must be wrapped whole by the named script, whose
// header takes every key of its own header, so its keys are checked through the wrapper.
var notCalledDirectly = map[string]string{
	"ack":        "ordered_ack",
	"cancel":     "ordered_cancel",
	"reschedule": "ordered_reschedule",
	"retry":      "ordered_retry",
	"recover":    "ordered_recover",
}

// keyRecorder is a go-redis hook that records the key lists of script calls by script.
type keyRecorder struct {
	byCmd map[string]string // function name, SHA-1 or source -> script
	mu    sync.Mutex
	calls map[string]map[string][]string // script -> distinct role lists -> keys
}

func newKeyRecorder(t *testing.T) *keyRecorder {
	lib, err := lua.NewLibrary("delaybridge", lua.Scripts)
	if err != nil {
		t.Fatal(err)
	}
	r := &keyRecorder{byCmd: map[string]string{}, calls: map[string]map[string][]string{}}
	add := func(script, src string) {
		sum := sha1.Sum([]byte(src))
		r.byCmd[hex.EncodeToString(sum[:])] = script
		r.byCmd[src] = script
	}
	for _, s := range lua.Scripts {
		r.byCmd[lib.Function(s)] = s
		add(s, lib.Eval(s))
	}
	add("lease_acquire", lua.LeaseAcquire)
	add("lease_renew", lua.LeaseRenew)
	add("lease_release", lua.LeaseRelease)
	return r
}

func (r *keyRecorder) record(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 3 {
		return
	}
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "fcall", "fcall_ro", "evalsha", "eval":
	default:
		return
	}
	script, ok := r.byCmd[fmt.Sprint(args[1])]
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if !ok || err != nil || len(args) < 3+n {
		script = "unknown script " + fmt.Sprint(args[1])
	}
	keys := make([]string, 0, n)
	for _, k := range args[3 : 3+max(n, 0)] {
		keys = append(keys, fmt.Sprint(k))
	}
	sig := strings.Join(roles(keys), " ")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls[script] == nil {
		r.calls[script] = map[string][]string{}
	}
	r.calls[script][sig] = keys
}

func (r *keyRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *keyRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *keyRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.record(c)
		}
		return next(ctx, cmds)
	}
}

// role is a key's name after its hash tag.
func role(key string) string {
	if i := strings.Index(key, "}:"); i >= 0 {
		return key[i+2:]
	}
	return key
}

func roles(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = role(k)
	}
	return out
}

// headerKey is one KEYS entry of a script's header.
type headerKey struct {
	index int
	name  string
	tail  bool   // KEYS[n..]: any number of keys from n on
	from  string // the script whose header gave it ("KEYS[a..b] <from>'s keys")
}

var (
	keyLine   = regexp.MustCompile(`^-- KEYS\[(\d+)(\.\.)?\]\s+(\S+)`)
	rangeLine = regexp.MustCompile(`^-- KEYS\[(\d+)\.\.(\d+)\]\s+([a-z_]+)'s keys`)
)

// readHeader parses the KEYS lines of script's leading comment block.
func readHeader(script string, seen map[string]bool) ([]headerKey, error) {
	if seen[script] {
		return nil, fmt.Errorf("header of %s: KEYS references loop", script)
	}
	seen[script] = true
	b, err := os.ReadFile(filepath.Join("..", "..", "lua", script+".lua"))
	if err != nil {
		return nil, err
	}
	var out []headerKey
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "--") {
			break
		}
		if m := rangeLine.FindStringSubmatch(line); m != nil {
			a, _ := strconv.Atoi(m[1])
			z, _ := strconv.Atoi(m[2])
			base, err := readHeader(m[3], seen)
			if err != nil {
				return nil, err
			}
			if z > len(base) {
				return nil, fmt.Errorf("header of %s: KEYS[%d..%d] of %s, which documents %d", script, a, z, m[3], len(base))
			}
			for _, k := range base[a-1 : z] {
				out = append(out, headerKey{index: k.index, name: k.name, tail: k.tail, from: m[3]})
			}
			continue
		}
		if m := keyLine.FindStringSubmatch(line); m != nil && strings.Count(line, "KEYS[") == 1 {
			i, _ := strconv.Atoi(m[1])
			out = append(out, headerKey{index: i, name: m[3], tail: m[2] != "", from: script})
		} else if strings.HasPrefix(line, "-- KEYS") || strings.Count(line, "KEYS[") > 1 {
			return nil, fmt.Errorf("header of %s: %q is not one `-- KEYS[i] <role> ...` entry", script, line)
		}
	}
	for i, k := range out {
		if k.index != i+1 || (k.tail && i != len(out)-1) {
			return nil, fmt.Errorf("header of %s: KEYS[%d] (%s) out of order: want KEYS 1, 2, ... with a tail last", script, k.index, k.name)
		}
	}
	return out, nil
}

// nameMatches says whether a key of role matches a header name.
func nameMatches(name, role string) bool {
	for _, alt := range strings.Split(name, "|") {
		if i := strings.Index(alt, "<"); i >= 0 {
			if len(role) > i && strings.HasPrefix(role, alt[:i]) {
				return true
			}
			continue
		}
		if role == alt || strings.HasSuffix(role, ":"+alt) {
			return true
		}
	}
	return false
}

// checkCall compares one call's keys with script's header.
func checkCall(script string, header []headerKey, keys []string) []string {
	if n := len(keys); n > 0 && role(keys[n-1]) == "slotguard" {
		keys = keys[:n-1]
	}
	var errs []string
	fixed := len(header)
	if fixed > 0 && header[fixed-1].tail {
		fixed--
	}
	if len(keys) < fixed || (fixed == len(header) && len(keys) != fixed) {
		errs = append(errs, fmt.Sprintf("%s: header documents %d KEYS, the call passes %d (slot guard not counted): %v",
			script, len(header), len(keys), roles(keys)))
	}
	for i, k := range keys {
		if len(header) == 0 {
			break
		}
		h := header[min(i, len(header)-1)]
		if i >= len(header) && !h.tail {
			break
		}
		if !nameMatches(h.name, role(k)) {
			errs = append(errs, fmt.Sprintf("%s: KEYS[%d]: header (%s.lua) expects %q, got %q (key %q)",
				script, i+1, h.from, h.name, role(k), k))
		}
	}
	return errs
}

// hooked is a redis-server of the test's own whose client reports to rec.
func hooked(t *testing.T, rec *keyRecorder) *redis.Client {
	c := testkit.StartRedis(t).Client()
	c.AddHook(rec)
	return c
}

func TestScriptKeysMatchHeaders(t *testing.T) {
	rec := newKeyRecorder(t)
	t.Run("suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
			return subject(t, hooked(t, rec), "delaybridge", "default", cfg, time.Sleep)
		}, storetest.Options{})
	})
	t.Run("suite-cold", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
			return subject(t, hooked(t, rec), "delaybridge", "default", cfg, time.Sleep, allCold)
		}, storetest.Options{})
	})
	t.Run("partition-leases", func(t *testing.T) {
		ctx := ctxFor(t)
		m := membership.New(hooked(t, rec), "delaybridge", "default")
		key := m.PartitionLease("orders", "orders.delay", 3)
		tok, err := m.Acquire(ctx, []membership.LeaseKey{key}, "i1", time.Minute)
		if err != nil || len(tok) != 1 || tok[0] < 1 {
			t.Fatalf("Acquire: %v %v", tok, err)
		}
		held := membership.Held{Key: key, Token: tok[0]}
		if _, err := m.Renew(ctx, "i1", []membership.Held{held}, time.Minute); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if err := m.Release(ctx, "i1", held); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	var errs []string
	for script := range rec.calls {
		if !contains(lua.Scripts, script) {
			errs = append(errs, "a call of "+script+", which is not in lua.Scripts")
		}
	}
	for _, script := range lua.Scripts {
		header, err := readHeader(script, map[string]bool{})
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if len(header) == 0 {
			errs = append(errs, script+": header documents no KEYS")
		}
		if wrapper, ok := notCalledDirectly[script]; ok {
			errs = append(errs, checkWrapped(script, wrapper, header, rec.calls[script])...)
			continue
		}
		if len(rec.calls[script]) == 0 {
			errs = append(errs, script+": never called while the suite ran; list it in notCalledDirectly with its wrapper, or cover it")
		}
		for _, keys := range rec.calls[script] {
			errs = append(errs, checkCall(script, header, keys)...)
		}
	}
	sort.Strings(errs)
	reported := map[string]bool{}
	for _, e := range errs {
		// One report per script and index (or count): job ids and key queues make
		// many calls of one drift differ only in their keys.
		k := e
		for _, cut := range []string{", got ", ", the call passes "} {
			if i := strings.Index(k, cut); i >= 0 {
				k = k[:i]
			}
		}
		if !reported[k] {
			reported[k] = true
			t.Error(e)
		}
	}
}

// checkWrapped checks that script, listed as called only through wrapper, is not called
// directly and that wrapper's header takes every key of script's header.
func checkWrapped(script, wrapper string, header []headerKey, calls map[string][]string) []string {
	var errs []string
	if len(calls) > 0 {
		errs = append(errs, script+": listed as called only through "+wrapper+", but called directly")
	}
	wh, err := readHeader(wrapper, map[string]bool{})
	if err != nil {
		return append(errs, err.Error())
	}
	n := 0
	for _, k := range wh {
		if k.from == script {
			n++
		}
	}
	if n != len(header) {
		errs = append(errs, fmt.Sprintf("%s: header documents %d KEYS, but %s's header takes %d of them (KEYS[a..b] %s's keys)",
			script, len(header), wrapper, n, script))
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
