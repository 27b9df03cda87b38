package envelope

import (
	"bytes"
	"math"
	"reflect"
	"testing"
	"time"
)

func sample() *Envelope {
	return &Envelope{
		ID: "orders/0/42", Route: "orders", SourceBroker: BrokerAMQP, Source: "billing.delay",
		Target: "alt", DueAt: 1700000000123, ReceivedAt: 1700000000000, Attempt: 3,
		Key: []byte{}, RoutingKey: "eu.invoice", Payload: []byte("hello \x00 world"),
		Headers: []Header{
			{"x-delay", int32(5000)}, {"s", "text"}, {"b", []byte{0, 1, 2}}, {"i8", int8(-3)},
			{"i16", int16(-300)}, {"i64", int64(-1 << 40)}, {"u8", uint8(200)}, {"u16", uint16(60000)},
			{"u32", uint32(4000000000)}, {"u64", uint64(1 << 63)}, {"f32", float32(1.5)}, {"f64", 2.25},
			{"bool", true}, {"t", time.Unix(1700000000, 0).UTC()}, {"dec", Decimal{Scale: 2, Value: 12345}},
			{"tbl", map[string]any{"a": "x", "n": map[string]any{"deep": int64(1)}}},
			{"arr", []any{"a", int64(2), nil}}, {"nil", nil},
		},
		AMQP: &AMQPProperties{ContentType: "application/json", DeliveryMode: 2, Priority: 7,
			CorrelationID: "c", ReplyTo: "r", Expiration: "60000", MessageID: "m",
			Timestamp: time.Unix(1700000000, 0).UTC(), Type: "t", UserID: "guest", AppID: "app"},
		Reason: "bad_delay: nope",
	}
}

// kafkaSample is what ingress/kafka parks for a 100-byte record with x-delay (the
// bench's scale message).
func kafkaSample() *Envelope {
	return &Envelope{ID: "scale.delay/5/1666666", Route: "scale", SourceBroker: BrokerKafka, Source: "scale.delay",
		DueAt: 1763836800123, ReceivedAt: 1763833200000, Key: []byte("k9999999"),
		Payload: []byte("0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"),
		Headers: []Header{{"x-delay", "3600123"}}}
}

func TestRoundTripKeepsEveryFieldAndType(t *testing.T) {
	for _, in := range []*Envelope{sample(), kafkaSample()} {
		b, err := Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != version2 {
			t.Fatalf("Encode wrote version %d, want %d", b[0], version2)
		}
		out, err := Decode(b, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("round trip differs:\n in=%#v\nout=%#v", in, out)
		}
	}
}

func TestVersion2DoesNotCarryTheID(t *testing.T) {
	in := kafkaSample()
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(in.ID)) {
		t.Fatalf("encoding contains the id %q", in.ID)
	}
	out, err := Decode(b, "other/id")
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != "other/id" {
		t.Fatalf("ID = %q, want the id passed to Decode", out.ID)
	}
	if out, _ := Decode(b, ""); out.ID != "" {
		t.Fatalf("ID = %q without an id, want empty", out.ID)
	}
}

func TestNilKeyStaysNil(t *testing.T) {
	in := &Envelope{ID: "a", Payload: []byte("p")}
	b, _ := Encode(in)
	out, err := Decode(b, "a")
	if err != nil {
		t.Fatal(err)
	}
	if out.Key != nil || out.AMQP != nil {
		t.Fatalf("nil key / absent AMQP must stay absent: %#v", out)
	}
	in.Key = []byte{}
	b, _ = Encode(in)
	if out, _ := Decode(b, "a"); out.Key == nil {
		t.Fatal("an empty key must stay present")
	}
}

func TestEveryOptionalFieldAloneRoundTrips(t *testing.T) {
	base := func() *Envelope {
		return &Envelope{ID: "id", Route: "r", SourceBroker: BrokerAMQP, Source: "q", DueAt: 5, ReceivedAt: 7}
	}
	props := []func(*AMQPProperties){
		func(p *AMQPProperties) { p.ContentType = "a" }, func(p *AMQPProperties) { p.ContentEncoding = "b" },
		func(p *AMQPProperties) { p.DeliveryMode = 2 }, func(p *AMQPProperties) { p.Priority = 9 },
		func(p *AMQPProperties) { p.CorrelationID = "c" }, func(p *AMQPProperties) { p.ReplyTo = "d" },
		func(p *AMQPProperties) { p.Expiration = "e" }, func(p *AMQPProperties) { p.MessageID = "f" },
		func(p *AMQPProperties) { p.Timestamp = time.Unix(0, 0).UTC() }, func(p *AMQPProperties) { p.Type = "g" },
		func(p *AMQPProperties) { p.UserID = "h" }, func(p *AMQPProperties) { p.AppID = "i" },
	}
	var cases []*Envelope
	for _, f := range props {
		e := base()
		e.AMQP = &AMQPProperties{}
		f(e.AMQP)
		cases = append(cases, e)
	}
	for _, f := range []func(*Envelope){
		func(e *Envelope) { e.AMQP = &AMQPProperties{} }, func(e *Envelope) { e.Target = "t" },
		func(e *Envelope) { e.Attempt = 1 << 30 }, func(e *Envelope) { e.RoutingKey = "rk" },
		func(e *Envelope) { e.Reason = "why" }, func(e *Envelope) { e.SourceBroker = "" },
		func(e *Envelope) { e.SourceBroker = "nats" }, func(e *Envelope) { e.SourceBroker = BrokerKafka },
		func(e *Envelope) { e.SourceBroker = BrokerHTTP }, func(e *Envelope) { e.Route, e.Source = "", "" },
		func(e *Envelope) { e.DueAt, e.ReceivedAt = math.MaxInt64, math.MinInt64 },
		func(e *Envelope) { e.DueAt, e.ReceivedAt = math.MinInt64, math.MaxInt64 },
		func(e *Envelope) { e.Headers = []Header{{"", ""}, {"traceparent", "00-x"}, {"X-Delay", "1"}} },
	} {
		e := base()
		f(e)
		cases = append(cases, e)
	}
	for i, in := range cases {
		b, err := Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Decode(b, in.ID)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("case %d differs:\n in=%#v\nout=%#v", i, in, out)
		}
	}
}

// Decimal text is stored as a number only when that gives back exactly the same text.
func TestDecimalTextComesBackExactly(t *testing.T) {
	texts := []string{"5000", "0", "-1", "-5000", "05000", "+5", " 5", "5 ", "-0", "00", "1e3", "5.0", "",
		"-", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
		"١٢", "0x10", "3600123"}
	times := [][2]int64{{1763836800123, 1763833200000}, {0, 0}, {math.MaxInt64, math.MinInt64},
		{math.MinInt64, math.MaxInt64}, {math.MinInt64, 1}, {-1, math.MaxInt64}}
	for _, s := range texts {
		for _, tm := range times {
			in := &Envelope{ID: "i", DueAt: tm[0], ReceivedAt: tm[1], Headers: []Header{
				{HeaderDelay, s}, {"n", s}, {"tbl", map[string]any{"x-delay": s, "a": []any{s}}},
				{HeaderDelay, []byte(s)},
			}}
			b, err := Encode(in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Decode(b, "i")
			if err != nil {
				t.Fatalf("%q %v: %v", s, tm, err)
			}
			if !reflect.DeepEqual(in, out) {
				t.Fatalf("%q %v differs:\n in=%#v\nout=%#v", s, tm, in, out)
			}
		}
	}
}

func TestUnsupportedHeaderTypeIsAnError(t *testing.T) {
	if _, err := Encode(&Envelope{ID: "a", Headers: []Header{{"x", struct{}{}}}}); err == nil {
		t.Fatal("want error for unsupported header type")
	}
}

// h2 is a version 2 envelope with nothing but one header, whose bytes are given.
func h2(header ...byte) []byte {
	return append([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1}, header...)
}

func TestDecodeRejectsCorruptInput(t *testing.T) {
	// The frames the cases below break are valid as such.
	for _, ok := range [][]byte{h2(10, tNil), h2(16+1, 'a', tNil), h2(16, tTable, 1, 0, tDecText, 0), h2(0, tDelayText, 0),
		{2, v2FlagAMQP, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x1f, 0, 0, 0, 0, 0},
		{2, v2FlagAttempt, 0, 0, 0, 0, 0, 2, 0, 0}} {
		if _, err := Decode(ok, "x"); err != nil {
			t.Fatalf("Decode(%x): %v, want a valid envelope", ok, err)
		}
	}

	good, _ := Encode(sample())
	bad := [][]byte{nil, {1}, {2}, {2, 0}, {3, 0, 0, 0}, {0, 0},
		good[:len(good)-1], append(append([]byte{}, good...), 0),
		// version 2 with flags, then empty route, broker name and source, times 0 0,
		// no payload (h2 prefixes one header):
		h2(15, tNil),                        // reserved well-known key code
		h2(16+5, 'a', tNil),                 // key longer than the input
		h2(0, 99),                           // unknown value tag
		h2(16, tTable, 1, 0, tDelayText, 0), // tDelayText nested
		{2, v2FlagAMQP, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x20}, // AMQP mask beyond 12 fields
		{2, v2FlagAttempt, 0, 0, 0, 0, 0, 1, 0, 0},       // negative attempt
		// a valid frame of the pre-release version 1:
		{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, tString, 0, 0},
	}
	for _, b := range bad {
		if _, err := Decode(b, "x"); err == nil {
			t.Errorf("Decode(%x) = nil error, want corrupt", b)
		}
	}
}

// TestCompactness pins the size that decides Redis memory per pending message: the
// envelope is one Redis string (3-byte sds header + NUL for these sizes) in a jemalloc
// size class (..., 128, 160, 192, 224, 256, ...). The bench's Kafka message (100-byte
// payload, 8-byte key, x-delay, 21-byte id) must stay within the 160-byte class.
func TestCompactness(t *testing.T) {
	e := kafkaSample()
	b, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bench Kafka message: %d bytes", len(b))
	if len(b)+4 > 160 {
		t.Fatalf("version 2 envelope is %d bytes, want <= 156 (the 160-byte jemalloc class)", len(b))
	}
	content := len(e.Payload) + len(e.Key) + len(e.Route) + len(e.Source)
	if overhead := len(b) - content; overhead > 24 {
		t.Fatalf("version 2 framing is %d bytes beyond payload, key, route and source, want <= 24", overhead)
	}
}

func FuzzDecode(f *testing.F) {
	for _, e := range []*Envelope{sample(), kafkaSample(), {ID: "a"}} {
		b, _ := Encode(e)
		f.Add(b)
	}
	f.Add([]byte{1, 0})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Decode(data, "fuzz/id")
		es, serr := DecodeString(string(data), "fuzz/id")
		if (err == nil) != (serr == nil) || !reflect.DeepEqual(e, es) {
			t.Fatalf("DecodeString = %#v, %v; Decode = %#v, %v", es, serr, e, err)
		}
		if err != nil {
			return
		}
		if e.ID != "fuzz/id" {
			t.Fatalf("ID = %q, want the id passed to Decode", e.ID)
		}
		// Whatever decodes must re-encode and decode to the same value.
		b, err := Encode(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		e2, err := Decode(b, e.ID)
		if err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		if (e.Key == nil) != (e2.Key == nil) {
			t.Fatalf("key presence changed")
		}
		// Bit-exact (NaN-safe): the encoding holds every field.
		b2, _ := Encode(e2)
		if !bytes.Equal(b, b2) {
			t.Fatalf("round trip changed the envelope:\n%#v\n%#v", e, e2)
		}
	})
}

// TestDecodeStringIsDecode: DecodeString reads what Decode reads — every field and type
// of both samples, and the same refusal of every corrupt input above — and it does so without copying the fields out of the string: fewer
// allocations than Decode, which is why the claim path uses it.
func TestDecodeStringIsDecode(t *testing.T) {
	good, _ := Encode(sample())
	kafka, _ := Encode(kafkaSample())
	inputs := [][]byte{good, kafka, nil, {2}, good[:len(good)-1], append(append([]byte{}, good...), 0), h2(16+5, 'a', tNil), h2(0, 99)}
	for _, in := range inputs {
		want, werr := Decode(in, "x")
		got, gerr := DecodeString(string(in), "x")
		if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(want, got) {
			t.Fatalf("DecodeString(%x) = %#v, %v; Decode gives %#v, %v", in, got, gerr, want, werr)
		}
	}
	s := string(kafka)
	viaCopy := testing.AllocsPerRun(100, func() { _, _ = Decode([]byte(s), "x") })
	viaString := testing.AllocsPerRun(100, func() { _, _ = DecodeString(s, "x") })
	if viaString >= viaCopy-3 {
		t.Fatalf("DecodeString allocates %.0f times, Decode of a copy %.0f: want route, source and payload not copied", viaString, viaCopy)
	}
}

// BenchmarkDecode: the bench's Kafka envelope as the claim path decodes it from a Redis
// reply (a string): copied to bytes and decoded, and DecodeString.
func BenchmarkDecode(b *testing.B) {
	raw, _ := Encode(kafkaSample())
	s := string(raw)
	b.Run("copy+Decode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = Decode([]byte(s), "x")
		}
	})
	b.Run("DecodeString", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = DecodeString(s, "x")
		}
	})
}

// TestAppendEncodeDoesNotAllocate: parking encodes every message into a buffer the
// store reuses, so encoding itself allocates nothing, decimal-text header values (the
// x-delay every message carries) included.
func TestAppendEncodeDoesNotAllocate(t *testing.T) {
	e := kafkaSample()
	e.Headers = append(e.Headers, Header{"n", "-42"}, Header{"padded", "007"}, Header{"text", "abc"})
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { _, _ = AppendEncode(buf[:0], e) }); n != 0 {
		t.Fatalf("AppendEncode allocates %.0f times per envelope, want 0", n)
	}
}
