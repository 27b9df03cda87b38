package envelope

import (
	"bytes"
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

func TestRoundTripKeepsEveryFieldAndType(t *testing.T) {
	in := sample()
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip differs:\n in=%#v\nout=%#v", in, out)
	}
}

func TestNilKeyStaysNil(t *testing.T) {
	in := &Envelope{ID: "a", Payload: []byte("p")}
	b, _ := Encode(in)
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Key != nil || out.AMQP != nil {
		t.Fatalf("nil key / absent AMQP must stay absent: %#v", out)
	}
}

func TestUnsupportedHeaderTypeIsAnError(t *testing.T) {
	_, err := Encode(&Envelope{ID: "a", Headers: []Header{{"x", struct{}{}}}})
	if err == nil {
		t.Fatal("want error for unsupported header type")
	}
}

func TestDecodeRejectsCorruptInput(t *testing.T) {
	good, _ := Encode(sample())
	for _, bad := range [][]byte{nil, {1}, {2, 0}, good[:len(good)-1], append(append([]byte{}, good...), 0)} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%x) = nil error, want corrupt", bad)
		}
	}
}

func TestCompactness(t *testing.T) {
	// A typical Kafka message: the envelope overhead beyond payload+key+headers stays small,
	// which is what bounds Redis memory per pending message.
	e := &Envelope{ID: "orders.delay/3/1234567", Route: "orders", SourceBroker: BrokerKafka,
		Source: "orders.delay", DueAt: 1700000000123, ReceivedAt: 1700000000000,
		Payload: make([]byte, 100), Headers: []Header{{"x-delay", "5000"}}}
	b, _ := Encode(e)
	content := len(e.Payload) + len(e.ID) + len(e.Route) + len(e.SourceBroker) + len(e.Source) + len("x-delay") + len("5000")
	if overhead := len(b) - content; overhead > 32 {
		t.Fatalf("envelope framing overhead %d bytes beyond its strings and payload, want <= 32", overhead)
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Encode(sample())
	f.Add(good)
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Decode(data)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same value.
		b, err := Encode(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		e2, err := Decode(b)
		if err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		b2, _ := Encode(e2)
		if !bytes.Equal(b, b2) {
			t.Fatalf("encoding not stable")
		}
	})
}
