package envelope

import (
	"fmt"
	"testing"
	"unsafe"
)

// TestDecodedRoutesAndTargetsAreShared: the route and target of envelopes decoded from
// different replies are one string each (not substrings of each reply), so the lookups
// keyed by them per message read memory every message shares.
func TestDecodedRoutesAndTargetsAreShared(t *testing.T) {
	in := &Envelope{ID: "a", Route: "route-shared", Target: "target-shared", Source: "src/1", DueAt: 5, Payload: []byte("p")}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	first, err := DecodeString(string(b), "a")
	if err != nil {
		t.Fatal(err)
	}
	second, err := DecodeString(string(append([]byte(nil), b...)), "b")
	if err != nil {
		t.Fatal(err)
	}
	viaBytes, err := Decode(b, "c")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*Envelope{first, second, viaBytes} {
		if e.Route != in.Route || e.Target != in.Target || e.Source != in.Source {
			t.Fatalf("decoded %q %q %q, want %q %q %q", e.Route, e.Target, e.Source, in.Route, in.Target, in.Source)
		}
	}
	if unsafe.StringData(first.Route) != unsafe.StringData(second.Route) || unsafe.StringData(first.Route) != unsafe.StringData(viaBytes.Route) {
		t.Error("three decodes of one route hold three strings")
	}
	if unsafe.StringData(first.Target) != unsafe.StringData(second.Target) {
		t.Error("two decodes of one target hold two strings")
	}
}

// TestInternerIsBounded: past maxInterned distinct strings the interner adds none and
// says so (the decoder then keeps its own string), still answering the ones it holds.
func TestInternerIsBounded(t *testing.T) {
	var in interner
	for i := range maxInterned {
		if _, ok := in.get(fmt.Appendf(nil, "r%d", i)); !ok {
			t.Fatalf("string %d of %d not interned", i, maxInterned)
		}
	}
	if s, ok := in.get([]byte("one too many")); ok || s != "" {
		t.Fatalf("a string past the bound was interned: %q", s)
	}
	a, _ := in.get([]byte("r7"))
	b, ok := in.get([]byte("r7"))
	if !ok || a != "r7" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("an interned string is not answered as one: %q %q %v", a, b, ok)
	}
	if n := len(*in.m.Load()); n != maxInterned {
		t.Fatalf("holds %d strings, want %d", n, maxInterned)
	}
}

// TestInternedLookupDoesNotAllocate: a route already interned costs no allocation.
func TestInternedLookupDoesNotAllocate(t *testing.T) {
	var in interner
	key := []byte("route-x")
	in.get(key)
	if n := testing.AllocsPerRun(100, func() { in.get(key) }); n != 0 {
		t.Fatalf("%v allocations per lookup of an interned string", n)
	}
}
