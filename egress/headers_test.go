package egress

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

func TestNegateDelay(t *testing.T) {
	cases := []struct {
		name string
		in   any
		want any
	}{
		{"string", "1500", "-1500"},
		{"string negative stays", "-1500", "-1500"},
		{"string zero", "0", "0"},
		{"string minus zero", "-0", "0"},
		{"string plus", "+1500", "-1500"},
		{"string blanks", " 1500\t", "-1500"},
		{"string fraction", "1500.9", "-1500"},
		{"string exponent", "1.5e3", "-1500"},
		{"string exact big int", "9007199254740993", "-9007199254740993"},
		{"string beyond int64", "99999999999999999999", "-100000000000000000000"},
		{"string beyond float64", "1e400", "1e400"},
		{"string NaN", "NaN", "NaN"},
		{"string Inf", "Inf", "Inf"},
		{"string words", "soon", "soon"},
		{"string empty", "", ""},
		{"bytes", []byte("2500"), []byte("-2500")},
		{"bytes blanks", []byte(" 2500 "), []byte("-2500")},
		{"bytes words", []byte("soon"), []byte("soon")},
		{"int8", int8(100), int8(-100)},
		{"int8 min", int8(math.MinInt8), int8(math.MinInt8)},
		{"int16", int16(300), int16(-300)},
		{"int32", int32(1500), int32(-1500)},
		{"int32 negative", int32(-7), int32(-7)},
		{"int64", int64(1500), int64(-1500)},
		{"int64 max", int64(math.MaxInt64), int64(-math.MaxInt64)},
		{"int64 min", int64(math.MinInt64), int64(math.MinInt64)},
		{"int", 1500, int64(-1500)},
		{"uint8", uint8(200), int64(-200)},
		{"uint16", uint16(1500), int64(-1500)},
		{"uint32", uint32(math.MaxUint32), int64(-math.MaxUint32)},
		{"uint64", uint64(1500), int64(-1500)},
		{"uint64 beyond int64", uint64(math.MaxUint64), int64(-math.MaxInt64)},
		{"uint64 top bit", uint64(1 << 63), int64(-math.MaxInt64)},
		{"float32", float32(1500.75), float32(-1500)},
		{"float64", 1500.9, float64(-1500)},
		{"float64 below one", 0.5, float64(0)},
		{"float64 negative", -3.5, float64(-3)},
		{"float64 huge", 1e300, float64(-1e300)},
		{"float64 +Inf", math.Inf(1), math.Inf(-1)},
		{"decimal", envelope.Decimal{Scale: 1, Value: 15009}, envelope.Decimal{Scale: 1, Value: -15009}},
		{"decimal negative", envelope.Decimal{Scale: 1, Value: -5}, envelope.Decimal{Scale: 1, Value: -5}},
		{"bool untouched", true, true},
		{"nil untouched", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := negate(c.in)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("negate(%T %v) = %T %v, want %T %v", c.in, c.in, got, got, c.want, c.want)
			}
		})
	}
	if got := negate(math.NaN()).(float64); !math.IsNaN(got) {
		t.Fatalf("NaN became %v", got)
	}
}

func TestOutgoingHeaders(t *testing.T) {
	orig := []envelope.Header{
		{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Key: envelope.HeaderMessageID, Value: "stale"},
		{Key: envelope.HeaderDelay, Value: "1500"},
		{Key: "dup", Value: "1"},
		{Key: envelope.HeaderAttempt, Value: "9"},
		{Key: "dup", Value: "2"},
		{Key: envelope.HeaderDueAt, Value: "0"},
		{Key: envelope.HeaderSource, Value: "other"},
		{Key: envelope.HeaderDeliverAt, Value: "1700000000000"},
		{Key: "typed", Value: int32(7)},
		{Key: envelope.HeaderDelay, Value: int32(20)},
	}
	env := &envelope.Envelope{ID: "order-1", Source: "orders.delay", DueAt: 1_700_000_001_234, Attempt: 2, Headers: append([]envelope.Header(nil), orig...)}
	got := OutgoingHeaders(env, env.Attempt+1)
	want := []envelope.Header{
		{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Key: envelope.HeaderDelay, Value: "-1500"},
		{Key: "dup", Value: "1"},
		{Key: "dup", Value: "2"},
		{Key: envelope.HeaderDeliverAt, Value: "1700000000000"},
		{Key: "typed", Value: int32(7)},
		{Key: envelope.HeaderDelay, Value: int32(-20)},
		{Key: envelope.HeaderMessageID, Value: "order-1"},
		{Key: envelope.HeaderDueAt, Value: int64(1_700_000_001_234)},
		{Key: envelope.HeaderSource, Value: "orders.delay"},
		{Key: envelope.HeaderAttempt, Value: int64(3)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("headers\n got %#v\nwant %#v", got, want)
	}
	if !reflect.DeepEqual(env.Headers, orig) {
		t.Fatalf("OutgoingHeaders modified the envelope's headers: %#v", env.Headers)
	}
	// Applying the rewrite again (a message that went through the bridge twice) keeps
	// x-delay negative and does not pile up added headers.
	env.Headers = got
	again := OutgoingHeaders(env, 1)
	if len(again) != len(got) {
		t.Fatalf("second rewrite has %d headers, want %d", len(again), len(got))
	}
	if v, _ := (&envelope.Envelope{Headers: again}).Header(envelope.HeaderDelay); v != "-1500" {
		t.Fatalf("x-delay after a second rewrite: %v", v)
	}
}

func TestOutgoingHeadersEmpty(t *testing.T) {
	got := OutgoingHeaders(&envelope.Envelope{ID: "x", Source: "s", DueAt: 5}, 1)
	want := []envelope.Header{
		{Key: envelope.HeaderMessageID, Value: "x"}, {Key: envelope.HeaderDueAt, Value: int64(5)},
		{Key: envelope.HeaderSource, Value: "s"}, {Key: envelope.HeaderAttempt, Value: int64(1)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v", got)
	}
}

func TestHeaderBytes(t *testing.T) {
	ts := time.Date(2026, 11, 22, 5, 6, 7, 890_000_000, time.FixedZone("x", 3600))
	cases := []struct {
		name string
		in   any
		want string
		null bool
	}{
		{"nil", nil, "", true},
		{"string", "a\x00\xffb", "a\x00\xffb", false},
		{"empty string", "", "", false},
		{"bytes", []byte{0, 1, 0xff}, "\x00\x01\xff", false},
		{"int8", int8(-8), "-8", false},
		{"int16", int16(-16), "-16", false},
		{"int32", int32(-1500), "-1500", false},
		{"int64", int64(1_700_000_000_123), "1700000000123", false},
		{"int", -7, "-7", false},
		{"uint8", uint8(255), "255", false},
		{"uint16", uint16(65535), "65535", false},
		{"uint32", uint32(math.MaxUint32), "4294967295", false},
		{"uint64", uint64(math.MaxUint64), "18446744073709551615", false},
		{"float32", float32(1.5), "1.5", false},
		{"float32 shortest", float32(0.1), "0.1", false},
		{"float64", -1500.0, "-1500", false},
		{"float64 fraction", 2.25, "2.25", false},
		{"float64 large", 1e21, "1e+21", false},
		{"bool true", true, "true", false},
		{"bool false", false, "false", false},
		{"time", ts, "2026-11-22T04:06:07Z", false},
		{"decimal", envelope.Decimal{Scale: 2, Value: 1999}, "19.99", false},
		{"decimal scale 0", envelope.Decimal{Value: -42}, "-42", false},
		{"decimal leading zeros", envelope.Decimal{Scale: 4, Value: 5}, "0.0005", false},
		{"decimal negative fraction", envelope.Decimal{Scale: 3, Value: -15}, "-0.015", false},
		{"decimal min", envelope.Decimal{Scale: 1, Value: math.MinInt32}, "-214748364.8", false},
		{"table", map[string]any{"b": int16(3), "a": "x"}, `{"a":"x","b":3}`, false},
		{"array", []any{"a", int32(1), true}, `["a",1,true]`, false},
		{"nested", map[string]any{"t": map[string]any{"n": nil}}, `{"t":{"n":null}}`, false},
		{"unencodable", map[string]any{"f": math.NaN()}, "map[f:NaN]", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := HeaderBytes(c.in)
			if c.null != (got == nil) {
				t.Fatalf("HeaderBytes(%#v) nil = %v, want %v", c.in, got == nil, c.null)
			}
			if string(got) != c.want {
				t.Fatalf("HeaderBytes(%T %v) = %q, want %q", c.in, c.in, got, c.want)
			}
		})
	}
}

// TestNegatedTextParsesBack: for every x-delay text ingress accepts as a positive delay,
// the rewritten value reads back as a delay <= 0 (due now): the loop guard holds.
func TestNegatedTextParsesBack(t *testing.T) {
	for _, s := range []string{"1", "1500", " 1500 ", "+7", "1.5e3", "0.9", "99999999999999999999", "9223372036854775807"} {
		n, ok := negText(s)
		if !ok {
			t.Errorf("%q not negated", s)
			continue
		}
		if f, err := strconv.ParseFloat(n, 64); err != nil || f > 0 || strings.TrimSpace(n) != n {
			t.Errorf("%q -> %q", s, n)
		}
	}
}

func FuzzNegate(f *testing.F) {
	for _, s := range []string{"1500", " -3 ", "1e400", "NaN", "x", "9223372036854775808", "-0.0"} {
		f.Add(s, int64(7), 1.5)
	}
	f.Fuzz(func(t *testing.T, s string, n int64, fl float64) {
		for _, v := range []any{s, []byte(s), n, int32(n), int16(n), int8(n), uint64(n), uint32(n), fl, float32(fl), envelope.Decimal{Scale: uint8(n), Value: int32(n)}} {
			out := negate(v)
			if reflect.TypeOf(out) != reflect.TypeOf(v) && fmt.Sprintf("%T", out) != "int64" {
				t.Fatalf("negate(%T) changed type to %T", v, out)
			}
			if num, ok := numberOf(out); ok && num > 0 {
				t.Fatalf("negate(%T %v) = %v, still positive", v, v, out)
			}
			_ = HeaderBytes(out)
		}
	})
}

// numberOf reads a negated value as a number when it is one.
func numberOf(v any) (float64, bool) {
	switch x := v.(type) {
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil && !math.IsNaN(f)
	case []byte:
		return numberOf(string(x))
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case float32:
		return float64(x), !math.IsNaN(float64(x))
	case float64:
		return x, !math.IsNaN(x)
	case envelope.Decimal:
		return float64(x.Value), true
	}
	return 0, false
}
