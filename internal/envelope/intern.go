package envelope

import (
	"maps"
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
// was not interned (the table is full). A full table is seen without the lock, so a
// value past the bound costs a lookup, not the mutex, on every decode.
func (in *interner) get(b []byte) (s string, ok bool) {
	if s, ok, done := in.lookup(b); done {
		return s, ok
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok, done := in.lookup(b); done {
		return s, ok
	}
	next := maps.Clone(in.load())
	if next == nil {
		next = make(map[string]string, 1)
	}
	s = string(b)
	next[s] = s
	in.m.Store(&next)
	return s, true
}

// lookup answers b from the current table: done is false only when b is not there and
// there is room to add it.
func (in *interner) lookup(b []byte) (s string, ok, done bool) {
	m := in.load()
	if s, ok := m[string(b)]; ok {
		return s, true, true
	}
	return "", false, len(m) >= maxInterned
}

func (in *interner) load() map[string]string {
	if p := in.m.Load(); p != nil {
		return *p
	}
	return nil
}
