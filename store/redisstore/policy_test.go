package redisstore

import (
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/observe"
)

// memoryState follows Redis's own rule: used memory less what is not counted
// (replication and AOF buffers) against maxmemory, 0 meaning no limit.
func TestMemoryState(t *testing.T) {
	for _, c := range []struct {
		info, want string
	}{
		{"used_memory:2000\r\nmaxmemory:1000\r\nmem_not_counted_for_evict:0\r\n", "above"},
		{"used_memory:2000\r\nmaxmemory:1000\r\nmem_not_counted_for_evict:1500\r\n", "below"},
		{"used_memory:900\r\nmaxmemory:1000\r\n", "below"},
		{"used_memory:2000\r\nmaxmemory:0\r\n", "below"},
		{"# Memory\r\nused_memory_human:2K\r\n", ""},
	} {
		if got := memoryState(infoFields(c.info)); got != c.want {
			t.Errorf("memoryState(%q) = %q, want %q", c.info, got, c.want)
		}
	}
}

// PolicyCheck fails before the first check and for an evicting policy (naming the
// node, the policy and the fix), and passes with a note for an allowed or unknown one.
func TestPolicyCheck(t *testing.T) {
	h := NewHealth(nil, HealthOptions{})
	if _, err := h.PolicyCheck(); err == nil {
		t.Error("PolicyCheck passes before any check")
	}
	h.update(map[string]nodeReport{"a:1": {nodePolicy: nodePolicy{policy: "noeviction"}}, "b:2": {nodePolicy: nodePolicy{policy: "allkeys-lru"}}})
	_, err := h.PolicyCheck()
	if err == nil || !strings.Contains(err.Error(), "allkeys-lru on b:2") || strings.Contains(err.Error(), "a:1") ||
		!strings.Contains(err.Error(), "CONFIG SET maxmemory-policy noeviction") {
		t.Errorf("PolicyCheck = %v, want an error naming allkeys-lru on b:2 and the fix only", err)
	}
	h.opt.AllowEviction = true
	if note, err := h.PolicyCheck(); err != nil || !strings.Contains(note, "allowed by redis.allow_eviction") {
		t.Errorf("PolicyCheck with AllowEviction = %q, %v; want a pass with a note", note, err)
	}
	h.opt.AllowEviction = false
	h.update(map[string]nodeReport{"b:2": {nodePolicy: nodePolicy{policy: observe.PolicyUnknown, why: "refused"}}})
	if note, err := h.PolicyCheck(); err != nil || !strings.Contains(note, "unknown") {
		t.Errorf("PolicyCheck with an unreadable policy = %q, %v; want a pass saying unknown", note, err)
	}
}
