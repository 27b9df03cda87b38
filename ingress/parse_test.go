package ingress

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

var (
	recvTime = time.UnixMilli(1_700_000_000_000)       // when the bridge received it
	baseTime = time.UnixMilli(1_700_000_000_000 - 500) // the record timestamp
	recvMs   = recvTime.UnixMilli()
	baseMs   = baseTime.UnixMilli()
	rules    = Rules{Route: "orders", MaxDelay: 24 * time.Hour, MaxPayloadBytes: 100, AllowTargets: []string{"orders.vip", "orders.eu"}}
	dayMs    = int64(24 * time.Hour / time.Millisecond)
)

func raw(headers ...envelope.Header) Raw {
	return Raw{
		Broker: envelope.BrokerKafka, Source: "orders.delay", Key: []byte("k"), Payload: []byte("payload"),
		Headers: headers, BaseTime: baseTime, ReceivedAt: recvTime, DefaultID: "orders.delay/0/42",
	}
}

func h(k string, v any) envelope.Header { return envelope.Header{Key: k, Value: v} }

// TestParseDelayForms covers every form x-delay arrives in: Kafka text (string or bytes)
// and each AMQP table type.
func TestParseDelayForms(t *testing.T) {
	type want struct {
		due     int64  // expected DueAt when valid
		invalid string // expected Invalid label
	}
	ok := func(delay int64) want {
		if delay <= 0 {
			return want{due: recvMs}
		}
		return want{due: baseMs + delay}
	}
	bad := want{invalid: InvalidBadDelay}
	far := want{invalid: InvalidDelayOutOfRange}
	cases := []struct {
		name string
		v    any
		want want
	}{
		{"string", "1500", ok(1500)},
		{"string with spaces", " 1500\t", ok(1500)},
		{"string plus sign", "+1500", ok(1500)},
		{"string float truncated", "1500.9", ok(1500)},
		{"string exponent", "1.5e3", ok(1500)},
		{"string zero", "0", ok(0)},
		{"string negative", "-1500", ok(-1)},
		{"string negative float", "-0.5", ok(-1)},
		{"string huge negative", "-99999999999999999999", ok(-1)},
		{"string at limit", strconv.FormatInt(dayMs, 10), ok(dayMs)},
		{"string over limit", strconv.FormatInt(dayMs+1, 10), far},
		{"string beyond int64", "99999999999999999999", far},
		{"string beyond float64", "1e400", far},
		{"string beyond float64 negative", "-1e400", ok(-1)},
		{"string empty", "", bad},
		{"string blank", "   ", bad},
		{"string words", "soon", bad},
		{"string unit suffix", "10s", bad},
		{"string hex", "0x10", bad},
		{"string NaN", "NaN", bad},
		{"string Inf", "Inf", bad},
		{"string -Inf", "-Inf", bad},
		{"string two numbers", "1 2", bad},
		{"bytes", []byte("2500"), ok(2500)},
		{"bytes negative", []byte("-1"), ok(-1)},
		{"bytes bad", []byte{0xff, 0x00}, bad},
		{"int8", int8(100), ok(100)},
		{"int8 negative", int8(-100), ok(-1)},
		{"int8 min", int8(math.MinInt8), ok(-1)},
		{"int16", int16(30000), ok(30000)},
		{"int16 negative", int16(-1), ok(-1)},
		{"int32", int32(86_400_000), ok(86_400_000)},
		{"int32 max over limit", int32(math.MaxInt32), far},
		{"int32 negative", int32(math.MinInt32), ok(-1)},
		{"int64", int64(5000), ok(5000)},
		{"int64 max", int64(math.MaxInt64), far},
		{"int64 min", int64(math.MinInt64), ok(-1)},
		{"int", 7000, ok(7000)},
		{"uint8", uint8(255), ok(255)},
		{"uint16", uint16(65535), ok(65535)},
		{"uint32", uint32(4_000_000), ok(4_000_000)},
		{"uint32 max over limit", uint32(math.MaxUint32), far},
		{"uint64", uint64(1000), ok(1000)},
		{"uint64 beyond int64", uint64(math.MaxUint64), far},
		{"float32", float32(1500.75), ok(1500)},
		{"float32 negative", float32(-3), ok(-1)},
		{"float64", 2500.999, ok(2500)},
		{"float64 below one", 0.9, ok(0)},
		{"float64 negative", -2500.5, ok(-1)},
		{"float64 huge", 1e300, far},
		{"float64 huge negative", -1e300, ok(-1)},
		{"float64 NaN", math.NaN(), bad},
		{"float64 +Inf", math.Inf(1), bad},
		{"float32 -Inf", float32(math.Inf(-1)), bad},
		{"decimal", envelope.Decimal{Scale: 2, Value: 150075}, ok(1500)},
		{"decimal scale 0", envelope.Decimal{Value: 42}, ok(42)},
		{"decimal negative", envelope.Decimal{Scale: 1, Value: -15}, ok(-1)},
		{"decimal large scale", envelope.Decimal{Scale: 255, Value: math.MaxInt32}, ok(0)},
		{"bool", true, bad},
		{"nil", nil, bad},
		{"time", time.Now(), bad},
		{"table", map[string]any{"a": 1}, bad},
		{"array", []any{int32(5)}, bad},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := Parse(raw(h(envelope.HeaderDelay, c.v)), rules)
			if it.CancelID != "" {
				t.Fatalf("became a cancel: %+v", it)
			}
			if it.Invalid != c.want.invalid {
				t.Fatalf("invalid %q (%s), want %q", it.Invalid, it.Env.Reason, c.want.invalid)
			}
			if c.want.invalid != "" {
				if !strings.HasPrefix(it.Env.Reason, c.want.invalid+": ") {
					t.Errorf("reason %q does not start with the label", it.Env.Reason)
				}
				if it.Env.DueAt != recvMs {
					t.Errorf("invalid item due %d, want receive time %d (on_invalid: deliver)", it.Env.DueAt, recvMs)
				}
				return
			}
			if it.Env.Reason != "" {
				t.Errorf("valid item has reason %q", it.Env.Reason)
			}
			if it.Env.DueAt != c.want.due {
				t.Errorf("due %d, want %d (delta %d)", it.Env.DueAt, c.want.due, it.Env.DueAt-c.want.due)
			}
		})
	}
}

func TestParseDeliverAtForms(t *testing.T) {
	at := recvMs + 60_000
	rfc := time.UnixMilli(at).UTC().Format(time.RFC3339Nano)
	cases := []struct {
		name    string
		v       any
		due     int64
		invalid string
	}{
		{"unix ms string", strconv.FormatInt(at, 10), at, ""},
		{"unix ms string spaces", " " + strconv.FormatInt(at, 10) + " ", at, ""},
		{"unix ms float string", strconv.FormatInt(at, 10) + ".7", at, ""},
		{"unix ms bytes", []byte(strconv.FormatInt(at, 10)), at, ""},
		{"unix ms int64", at, at, ""},
		{"unix ms uint64", uint64(at), at, ""},
		{"unix ms float64", float64(at), at, ""},
		{"rfc3339 utc", rfc, at, ""},
		{"rfc3339 seconds", time.UnixMilli(at).UTC().Format(time.RFC3339), at / 1000 * 1000, ""},
		{"rfc3339 offset", time.UnixMilli(at).In(time.FixedZone("x", 5*3600+1800)).Format(time.RFC3339Nano), at, ""},
		{"rfc3339 bytes", []byte(rfc), at, ""},
		{"amqp timestamp", time.UnixMilli(at), at, ""},
		{"in the past", strconv.FormatInt(recvMs-3_600_000, 10), recvMs - 3_600_000, ""},
		{"past rfc3339", "2001-02-03T04:05:06Z", time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC).UnixMilli(), ""},
		{"at limit", strconv.FormatInt(recvMs+dayMs, 10), recvMs + dayMs, ""},
		{"over limit", strconv.FormatInt(recvMs+dayMs+1, 10), 0, InvalidDelayOutOfRange},
		{"over limit rfc3339", "2999-01-01T00:00:00Z", 0, InvalidDelayOutOfRange},
		{"beyond int64", "99999999999999999999", 0, InvalidDelayOutOfRange},
		{"zero", "0", 0, InvalidBadDeliverAt},
		{"negative", "-5", 0, InvalidBadDeliverAt},
		{"negative int", int32(-5), 0, InvalidBadDeliverAt},
		{"empty", "", 0, InvalidBadDeliverAt},
		{"date only", "2026-01-01", 0, InvalidBadDeliverAt},
		{"words", "tomorrow", 0, InvalidBadDeliverAt},
		{"bool", false, 0, InvalidBadDeliverAt},
		{"NaN", math.NaN(), 0, InvalidBadDeliverAt},
		{"nil", nil, 0, InvalidBadDeliverAt},
		// A number too small to be unix ms of this century is refused, never due in 1970:
		// 10 digits are unix seconds.
		{"unix seconds string", strconv.FormatInt(at/1000, 10), 0, InvalidBadDeliverAt},
		{"unix seconds bytes", []byte(strconv.FormatInt(at/1000, 10)), 0, InvalidBadDeliverAt},
		{"unix seconds int64", at / 1000, 0, InvalidBadDeliverAt},
		{"unix seconds int32", int32(at / 1000), 0, InvalidBadDeliverAt},
		{"unix seconds uint32", uint32(at / 1000), 0, InvalidBadDeliverAt},
		{"unix seconds float", float64(at)/1000 + 0.25, 0, InvalidBadDeliverAt},
		{"unix seconds float string", strconv.FormatInt(at/1000, 10) + ".5", 0, InvalidBadDeliverAt},
		{"unix seconds exponent", "1.7e9", 0, InvalidBadDeliverAt},
		{"unix seconds decimal", envelope.Decimal{Scale: 0, Value: int32(at / 1000 / 2)}, 0, InvalidBadDeliverAt},
		{"small", "5", 0, InvalidBadDeliverAt},
		{"11 digits", "94668479999", 0, InvalidBadDeliverAt},
		{"just before 2000", strconv.FormatInt(minDeliverAt-1, 10), 0, InvalidBadDeliverAt},
		{"2000 exactly", strconv.FormatInt(minDeliverAt, 10), minDeliverAt, ""},
		{"2000 exactly int64", minDeliverAt, minDeliverAt, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := Parse(raw(h(envelope.HeaderDeliverAt, c.v)), rules)
			if it.Invalid != c.invalid {
				t.Fatalf("invalid %q (%s), want %q", it.Invalid, it.Env.Reason, c.invalid)
			}
			if c.invalid == "" && it.Env.DueAt != c.due {
				t.Errorf("due %d, want %d", it.Env.DueAt, c.due)
			}
			if (c.invalid != "") != (it.Env.Reason != "") {
				t.Errorf("reason %q with invalid %q", it.Env.Reason, it.Invalid)
			}
		})
	}
}

// minDeliverAt is 2000-01-01T00:00:00Z in unix milliseconds.
var minDeliverAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// The reason of a unix-seconds x-deliver-at says what is wrong and how to fix it.
func TestParseDeliverAtSecondsReason(t *testing.T) {
	it := Parse(raw(h(envelope.HeaderDeliverAt, "1700000060")), rules)
	if it.Invalid != InvalidBadDeliverAt || !strings.Contains(it.Env.Reason, "unix seconds") ||
		!strings.Contains(it.Env.Reason, "1700000060") {
		t.Errorf("invalid %q, reason %q", it.Invalid, it.Env.Reason)
	}
	// A good x-delay does not rescue it either.
	it = Parse(raw(h(envelope.HeaderDelay, "100"), h(envelope.HeaderDeliverAt, int64(1700000060))), rules)
	if it.Invalid != InvalidBadDeliverAt {
		t.Errorf("seconds with a good x-delay: invalid %q", it.Invalid)
	}
}

func TestParseDeliverAtWinsOverDelay(t *testing.T) {
	at := recvMs + 5000
	for _, order := range [][]envelope.Header{
		{h(envelope.HeaderDelay, "100"), h(envelope.HeaderDeliverAt, strconv.FormatInt(at, 10))},
		{h(envelope.HeaderDeliverAt, strconv.FormatInt(at, 10)), h(envelope.HeaderDelay, "100")},
	} {
		if it := Parse(raw(order...), rules); it.Invalid != "" || it.Env.DueAt != at {
			t.Errorf("%v: due %d invalid %q, want %d", order, it.Env.DueAt, it.Invalid, at)
		}
	}
	// A bad x-deliver-at is not rescued by a good x-delay.
	if it := Parse(raw(h(envelope.HeaderDelay, "100"), h(envelope.HeaderDeliverAt, "later")), rules); it.Invalid != InvalidBadDeliverAt {
		t.Errorf("bad deliver-at with good delay: %q", it.Invalid)
	}
}

func TestParseNoDelayIsDueNow(t *testing.T) {
	it := Parse(raw(h("traceparent", "x")), rules)
	if it.Invalid != "" || it.Env.DueAt != recvMs {
		t.Fatalf("due %d invalid %q, want due at receipt", it.Env.DueAt, it.Invalid)
	}
}

func TestParseBaseTime(t *testing.T) {
	r := raw(h(envelope.HeaderDelay, "1000"))
	r.BaseTime = time.Time{} // AMQP without a timestamp property: count from receipt
	if it := Parse(r, rules); it.Env.DueAt != recvMs+1000 {
		t.Errorf("zero base: due %d, want %d", it.Env.DueAt, recvMs+1000)
	}
	r.BaseTime = recvTime.Add(-time.Hour) // an old record (consumer lag): due in the past
	if it := Parse(r, rules); it.Env.DueAt != recvMs-3_600_000+1000 {
		t.Errorf("old base: due %d", it.Env.DueAt)
	}
	r.ReceivedAt, r.BaseTime = time.Time{}, time.Time{}
	before := time.Now().UnixMilli()
	it := Parse(r, rules)
	if it.Env.ReceivedAt < before || it.Env.ReceivedAt > time.Now().UnixMilli() || it.Env.DueAt != it.Env.ReceivedAt+1000 {
		t.Errorf("zero receive time must default to now: received %d due %d", it.Env.ReceivedAt, it.Env.DueAt)
	}
}

func TestParseCopiesRecord(t *testing.T) {
	hs := []envelope.Header{h("traceparent", "tp"), h(envelope.HeaderDelay, "10"), h("x-n", int32(3))}
	r := raw(hs...)
	r.RoutingKey = "rk"
	r.AMQP = &envelope.AMQPProperties{ContentType: "application/json"}
	it := Parse(r, rules)
	e := it.Env
	if e.Route != "orders" || e.SourceBroker != envelope.BrokerKafka || e.Source != "orders.delay" || e.ReceivedAt != recvMs ||
		string(e.Key) != "k" || string(e.Payload) != "payload" || e.RoutingKey != "rk" || e.AMQP != r.AMQP || e.Target != "" || e.Attempt != 0 {
		t.Fatalf("envelope %+v", e)
	}
	if len(e.Headers) != 3 || e.Headers[0] != hs[0] || e.Headers[2] != hs[2] {
		t.Fatalf("headers %+v, want all kept in order", e.Headers)
	}
}

func TestParseMessageID(t *testing.T) {
	cases := []struct {
		name    string
		r       Raw
		id      string
		invalid string
	}{
		{"default from source position", raw(), "orders.delay/0/42", ""},
		{"header wins", raw(h(envelope.HeaderMessageID, "order-1")), "order-1", ""},
		{"header bytes", raw(h(envelope.HeaderMessageID, []byte("order-2"))), "order-2", ""},
		{"empty header falls back", raw(h(envelope.HeaderMessageID, "")), "orders.delay/0/42", ""},
		{"non-text header falls back", raw(h(envelope.HeaderMessageID, int64(5))), "orders.delay/0/42", ""},
		{"max length", raw(h(envelope.HeaderMessageID, strings.Repeat("a", MaxIDBytes))), strings.Repeat("a", MaxIDBytes), ""},
		{"too long", raw(h(envelope.HeaderMessageID, strings.Repeat("a", MaxIDBytes+1))), strings.Repeat("a", MaxIDBytes), InvalidBadMessageID},
		{"invalid utf-8", raw(h(envelope.HeaderMessageID, "a\xffb")), "a\xffb", InvalidBadMessageID},
		{"unicode", raw(h(envelope.HeaderMessageID, "заказ-№1")), "заказ-№1", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := Parse(c.r, rules)
			if it.Invalid != c.invalid || it.Env.ID != c.id {
				t.Fatalf("id %q invalid %q, want %q %q", it.Env.ID, it.Invalid, c.id, c.invalid)
			}
		})
	}
	// No id at all (an AMQP message without message_id and no source default): invalid,
	// but still identifiable for the dead letters.
	r := raw()
	r.DefaultID = ""
	it := Parse(r, rules)
	if it.Invalid != InvalidBadMessageID || it.Env.ID == "" || it.Env.Reason == "" {
		t.Fatalf("no id: %+v", it)
	}
}

func TestParseCancel(t *testing.T) {
	it := Parse(raw(h(envelope.HeaderCancel, "order-7"), h(envelope.HeaderDelay, "garbage")), rules)
	if it.CancelID != "order-7" || it.Invalid != "" {
		t.Fatalf("cancel: %+v", it)
	}
	if it := Parse(raw(h(envelope.HeaderCancel, []byte("order-8"))), rules); it.CancelID != "order-8" {
		t.Fatalf("cancel bytes: %+v", it)
	}
	// An empty cancel header cancels nothing; the record is an ordinary message.
	if it := Parse(raw(h(envelope.HeaderCancel, "")), rules); it.CancelID != "" || it.Invalid != "" {
		t.Fatalf("empty cancel: %+v", it)
	}
}

// x-delay-replace: any truthy value in the forms Kafka and AMQP headers carry makes the
// message a replace; falsy values and other text do not; an invalid message is never
// a replace.
func TestParseReplace(t *testing.T) {
	cases := []struct {
		v    any
		want bool
	}{
		{"true", true}, {"TRUE", true}, {" yes ", true}, {"1", true}, {"on", true}, {"t", true},
		{[]byte("true"), true}, {[]byte("1"), true}, {true, true}, {int8(1), true}, {int32(-1), true},
		{int64(7), true}, {uint8(1), true}, {1.0, true},
		{"false", false}, {"0", false}, {"", false}, {"no", false}, {"maybe", false}, {[]byte("0"), false},
		{false, false}, {int32(0), false}, {0.0, false}, {nil, false},
	}
	for _, c := range cases {
		it := Parse(raw(h(envelope.HeaderMessageID, "cart-1"), h(envelope.HeaderReplace, c.v)), rules)
		if it.Replace != c.want || it.Invalid != "" {
			t.Errorf("x-delay-replace %T %v: Replace %v (invalid %q), want %v", c.v, c.v, it.Replace, it.Invalid, c.want)
		}
	}
	if it := Parse(raw(h(envelope.HeaderReplace, "true"), h(envelope.HeaderDelay, "garbage")), rules); it.Replace || it.Invalid == "" {
		t.Errorf("invalid replace: %+v, want invalid and not a replace", it)
	}
}

func TestParseTargets(t *testing.T) {
	cases := []struct {
		name    string
		v       any
		allow   []string
		target  string
		invalid string
	}{
		{"allowed", "orders.vip", rules.AllowTargets, "orders.vip", ""},
		{"allowed bytes", []byte("orders.eu"), rules.AllowTargets, "orders.eu", ""},
		{"not on list", "payments", rules.AllowTargets, "", InvalidTargetNotAllowed},
		{"prefix of allowed", "orders", rules.AllowTargets, "", InvalidTargetNotAllowed},
		{"case differs", "ORDERS.VIP", rules.AllowTargets, "", InvalidTargetNotAllowed},
		{"empty value", "", rules.AllowTargets, "", InvalidTargetNotAllowed},
		{"non-text", int32(1), rules.AllowTargets, "", InvalidTargetNotAllowed},
		{"override not allowed on route", "orders.vip", nil, "", InvalidTargetNotAllowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rl := rules
			rl.AllowTargets = c.allow
			it := Parse(raw(h(envelope.HeaderDelayTarget, c.v)), rl)
			if it.Invalid != c.invalid || it.Env.Target != c.target {
				t.Fatalf("target %q invalid %q, want %q %q", it.Env.Target, it.Invalid, c.target, c.invalid)
			}
		})
	}
}

func TestParsePayloadLimit(t *testing.T) {
	r := raw()
	r.Payload = make([]byte, rules.MaxPayloadBytes)
	if it := Parse(r, rules); it.Invalid != "" {
		t.Fatalf("payload at limit: %q", it.Invalid)
	}
	r.Payload = make([]byte, rules.MaxPayloadBytes+1)
	it := Parse(r, rules)
	if it.Invalid != InvalidPayloadTooLarge || len(it.Env.Payload) != rules.MaxPayloadBytes+1 {
		t.Fatalf("payload over limit: %q, payload kept %d bytes", it.Invalid, len(it.Env.Payload))
	}
	rl := rules
	rl.MaxPayloadBytes = 0 // no limit
	if it := Parse(r, rl); it.Invalid != "" {
		t.Fatalf("no limit: %q", it.Invalid)
	}
}

func TestParseNoMaxDelay(t *testing.T) {
	rl := rules
	rl.MaxDelay = 0
	for _, v := range []any{int64(math.MaxInt64), "9223372036854775807", uint64(math.MaxInt64)} {
		it := Parse(raw(h(envelope.HeaderDelay, v)), rl)
		if it.Invalid == "" && it.Env.DueAt < recvMs {
			t.Errorf("x-delay %v without a limit: due %d overflowed into the past", v, it.Env.DueAt)
		}
	}
	if it := Parse(raw(h(envelope.HeaderDelay, int64(10*365*dayMs))), rl); it.Invalid != "" || it.Env.DueAt != baseMs+10*365*dayMs {
		t.Errorf("10 years without a limit: %+v", it)
	}
}

var knownReasons = map[string]bool{
	InvalidBadDelay: true, InvalidBadDeliverAt: true, InvalidDelayOutOfRange: true,
	InvalidPayloadTooLarge: true, InvalidTargetNotAllowed: true, InvalidBadMessageID: true,
}

// FuzzParse: Parse never panics, an item is exactly one of cancel / invalid / valid, an
// invalid item always carries a known label and a reason, and a valid one respects the
// limits.
func FuzzParse(f *testing.F) {
	f.Add("1500", "", "id", "", "", uint8(0), int64(0), 0.0, uint16(7))
	f.Add("", "1700000060000", "", "", "orders.vip", uint8(1), int64(-1), 1.5, uint16(200))
	f.Add("x", "2026-01-01T00:00:00Z", "a\xff", "c", "no", uint8(2), int64(math.MaxInt64), math.Inf(1), uint16(0))
	f.Add("-1e400", "1e400", strings.Repeat("z", 600), "", "", uint8(255), int64(math.MinInt64), math.NaN(), uint16(101))
	f.Fuzz(func(t *testing.T, delay, deliverAt, id, cancel, target string, kinds uint8, n int64, fl float64, payloadLen uint16) {
		var hs []envelope.Header
		typed := func(s string, kind uint8) any {
			switch kind % 8 {
			case 0:
				return s
			case 1:
				return []byte(s)
			case 2:
				return n
			case 3:
				return int32(n)
			case 4:
				return fl
			case 5:
				return float32(fl)
			case 6:
				return uint64(n)
			default:
				return envelope.Decimal{Scale: uint8(n), Value: int32(n >> 8)}
			}
		}
		if delay != "" || kinds&1 != 0 {
			hs = append(hs, h(envelope.HeaderDelay, typed(delay, kinds)))
		}
		if deliverAt != "" {
			hs = append(hs, h(envelope.HeaderDeliverAt, typed(deliverAt, kinds>>3)))
		}
		if id != "" {
			hs = append(hs, h(envelope.HeaderMessageID, id))
		}
		if cancel != "" {
			hs = append(hs, h(envelope.HeaderCancel, cancel))
		}
		if target != "" {
			hs = append(hs, h(envelope.HeaderDelayTarget, target))
		}
		r := raw(hs...)
		r.Payload = make([]byte, payloadLen)
		if kinds&0x40 != 0 {
			r.DefaultID = ""
		}
		it := Parse(r, rules)
		if it.Env == nil {
			t.Fatal("nil Env")
		}
		switch {
		case it.CancelID != "":
			if it.Invalid != "" {
				t.Fatalf("cancel and invalid at once: %+v", it)
			}
		case it.Invalid != "":
			if !knownReasons[it.Invalid] {
				t.Fatalf("unknown invalid label %q", it.Invalid)
			}
			if !strings.HasPrefix(it.Env.Reason, it.Invalid+": ") {
				t.Fatalf("invalid %q with reason %q", it.Invalid, it.Env.Reason)
			}
			if it.Env.ID == "" {
				t.Fatal("invalid item without an id cannot be dead-lettered")
			}
		default:
			e := it.Env
			if e.Reason != "" {
				t.Fatalf("valid item with reason %q", e.Reason)
			}
			if e.ID == "" || len(e.ID) > MaxIDBytes || !utf8.ValidString(e.ID) {
				t.Fatalf("valid item with bad id %q", e.ID)
			}
			if len(e.Payload) > rules.MaxPayloadBytes {
				t.Fatalf("valid item with %d-byte payload", len(e.Payload))
			}
			if e.DueAt-recvMs > rules.MaxDelay.Milliseconds() {
				t.Fatalf("valid item due %d ms after receipt, limit %d", e.DueAt-recvMs, rules.MaxDelay.Milliseconds())
			}
			if _, has := e.Header(envelope.HeaderDeliverAt); !has && e.DueAt < baseMs && e.DueAt != recvMs {
				t.Fatalf("x-delay item due %d before its base %d", e.DueAt, baseMs)
			}
			if e.Target != "" && !allowed(e.Target, rules.AllowTargets) {
				t.Fatalf("target %q not on the allow-list", e.Target)
			}
		}
	})
}
