package envelope

import (
	"sync"
	"sync/atomic"
)

// maxInterned bounds the strings the interner keeps. Routes and targets come from the
// configuration, a handful per bridge; past this many distinct values (a store full of
// retired routes, say) further ones are decoded as before, uninterned.
const maxInterned = 1024

// interner hands out one string per distinct route or target decoded. A claimed
// envelope's strings are substrings of its own Redis reply (DecodeString), so every
// message's route lived in memory of its own, decoded seconds before it fired: each
// per-message lookup keyed by it (the metrics' series, egress by route and topic) read
// it from a cold cache line. Interned, they share one string, which stays in cache,
// and equal strings compare by pointer.
//
// Lookups read an immutable map through an atomic pointer (no lock, and `m[string(b)]`
// does not allocate); a miss copies the map with the new string under a mutex, which
// happens once per distinct value.
type interner struct {
	m  atomic.Pointer[map[string]string]
	mu sync.Mutex
}

var interned interner

// get returns the interned copy of b, adding it when there is room; ok is false when b
// was not interned (the table is full).
func (in *interner) get(b []byte) (s string, ok bool) {
	if m := in.m.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s, true
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.m.Load()
	if old != nil {
		if s, ok := (*old)[string(b)]; ok {
			return s, true
		}
		if len(*old) >= maxInterned {
			return "", false
		}
	}
	next := make(map[string]string, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	s = string(b)
	next[s] = s
	in.m.Store(&next)
	return s, true
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
