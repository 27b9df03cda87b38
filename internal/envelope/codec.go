package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Version 1 layout (all integers varint/uvarint, byte strings length-prefixed by uvarint):
//
//	0x01 | flags | ID Route SourceBroker Source Target | DueAt ReceivedAt Attempt |
//	Key(present flag) RoutingKey Payload | nHeaders {key value}* | [AMQP props] | Reason
//
// flags bit0: Key present (distinguishes nil from empty), bit1: AMQP properties present.
// A header value is a one-byte type tag followed by its encoding (see appendValue).
const version1 = 1

// ErrCorrupt is returned by Decode for input that is not a valid envelope.
var ErrCorrupt = errors.New("envelope: corrupt encoding")

// maxDepth bounds nesting of AMQP tables/arrays so hostile input cannot blow the stack.
const maxDepth = 32

const (
	flagKey  = 1 << 0
	flagAMQP = 1 << 1
)

// value type tags
const (
	tNil     = 0
	tString  = 1
	tBytes   = 2
	tInt8    = 3
	tInt16   = 4
	tInt32   = 5
	tInt64   = 6
	tUint8   = 7
	tUint16  = 8
	tUint32  = 9
	tFloat32 = 10
	tFloat64 = 11
	tBool    = 12
	tTime    = 13
	tDecimal = 14
	tTable   = 15
	tArray   = 16
	tInt     = 17 // Go int (from JSON/HTTP callers); decoded back as int64
	tUint64  = 18
)

// Encode returns the binary form of e. It fails only for header values of a type the
// format cannot carry.
func Encode(e *Envelope) ([]byte, error) {
	return AppendEncode(make([]byte, 0, 64+len(e.Payload)+len(e.Key)+16*len(e.Headers)), e)
}

// AppendEncode appends the binary form of e to dst.
func AppendEncode(dst []byte, e *Envelope) ([]byte, error) {
	var flags byte
	if e.Key != nil {
		flags |= flagKey
	}
	if e.AMQP != nil {
		flags |= flagAMQP
	}
	b := append(dst, version1, flags)
	b = appendString(b, e.ID)
	b = appendString(b, e.Route)
	b = appendString(b, e.SourceBroker)
	b = appendString(b, e.Source)
	b = appendString(b, e.Target)
	b = binary.AppendVarint(b, e.DueAt)
	b = binary.AppendVarint(b, e.ReceivedAt)
	b = binary.AppendVarint(b, int64(e.Attempt))
	b = appendBytes(b, e.Key)
	b = appendString(b, e.RoutingKey)
	b = appendBytes(b, e.Payload)
	b = binary.AppendUvarint(b, uint64(len(e.Headers)))
	var err error
	for _, h := range e.Headers {
		b = appendString(b, h.Key)
		if b, err = appendValue(b, h.Value, 0); err != nil {
			return nil, fmt.Errorf("header %q: %w", h.Key, err)
		}
	}
	if p := e.AMQP; p != nil {
		b = appendString(b, p.ContentType)
		b = appendString(b, p.ContentEncoding)
		b = append(b, p.DeliveryMode, p.Priority)
		b = appendString(b, p.CorrelationID)
		b = appendString(b, p.ReplyTo)
		b = appendString(b, p.Expiration)
		b = appendString(b, p.MessageID)
		var ts int64
		if !p.Timestamp.IsZero() {
			ts = p.Timestamp.Unix()
		}
		b = binary.AppendVarint(b, ts)
		b = appendString(b, p.Type)
		b = appendString(b, p.UserID)
		b = appendString(b, p.AppID)
	}
	b = appendString(b, e.Reason)
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errors.New("nesting too deep")
	}
	switch x := v.(type) {
	case nil:
		return append(b, tNil), nil
	case string:
		return appendString(append(b, tString), x), nil
	case []byte:
		return appendBytes(append(b, tBytes), x), nil
	case int8:
		return append(b, tInt8, byte(x)), nil
	case int16:
		return binary.AppendVarint(append(b, tInt16), int64(x)), nil
	case int32:
		return binary.AppendVarint(append(b, tInt32), int64(x)), nil
	case int64:
		return binary.AppendVarint(append(b, tInt64), x), nil
	case int:
		return binary.AppendVarint(append(b, tInt), int64(x)), nil
	case uint8:
		return append(b, tUint8, x), nil
	case uint16:
		return binary.AppendUvarint(append(b, tUint16), uint64(x)), nil
	case uint32:
		return binary.AppendUvarint(append(b, tUint32), uint64(x)), nil
	case uint64:
		return binary.AppendUvarint(append(b, tUint64), x), nil
	case float32:
		return binary.LittleEndian.AppendUint32(append(b, tFloat32), math.Float32bits(x)), nil
	case float64:
		return binary.LittleEndian.AppendUint64(append(b, tFloat64), math.Float64bits(x)), nil
	case bool:
		if x {
			return append(b, tBool, 1), nil
		}
		return append(b, tBool, 0), nil
	case time.Time:
		return binary.AppendVarint(append(b, tTime), x.Unix()), nil
	case Decimal:
		b = append(b, tDecimal, x.Scale)
		return binary.AppendVarint(b, int64(x.Value)), nil
	case map[string]any:
		b = binary.AppendUvarint(append(b, tTable), uint64(len(x)))
		var err error
		for _, k := range sortedKeys(x) {
			b = appendString(b, k)
			if b, err = appendValue(b, x[k], depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	case []any:
		b = binary.AppendUvarint(append(b, tArray), uint64(len(x)))
		var err error
		for _, el := range x {
			if b, err = appendValue(b, el, depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	default:
		return nil, fmt.Errorf("unsupported header value type %T", v)
	}
}

// Decode parses the binary form produced by Encode.
func Decode(data []byte) (*Envelope, error) {
	d := decoder{buf: data}
	if len(data) < 2 {
		return nil, ErrCorrupt
	}
	if data[0] != version1 {
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorrupt, data[0])
	}
	flags := data[1]
	d.buf = data[2:]
	e := &Envelope{}
	e.ID = d.string()
	e.Route = d.string()
	e.SourceBroker = d.string()
	e.Source = d.string()
	e.Target = d.string()
	e.DueAt = d.varint()
	e.ReceivedAt = d.varint()
	attempt := d.varint()
	if attempt < 0 || attempt > math.MaxInt32 {
		d.fail()
	}
	e.Attempt = int32(attempt)
	key := d.bytes()
	if flags&flagKey != 0 {
		e.Key = key
		if e.Key == nil {
			e.Key = []byte{}
		}
	}
	e.RoutingKey = d.string()
	e.Payload = d.bytes()
	n := d.count()
	if n > 0 {
		e.Headers = make([]Header, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		k := d.string()
		v := d.value(0)
		e.Headers = append(e.Headers, Header{Key: k, Value: v})
	}
	if flags&flagAMQP != 0 {
		p := &AMQPProperties{}
		p.ContentType = d.string()
		p.ContentEncoding = d.string()
		p.DeliveryMode = d.byte()
		p.Priority = d.byte()
		p.CorrelationID = d.string()
		p.ReplyTo = d.string()
		p.Expiration = d.string()
		p.MessageID = d.string()
		if ts := d.varint(); ts != 0 {
			p.Timestamp = time.Unix(ts, 0).UTC()
		}
		p.Type = d.string()
		p.UserID = d.string()
		p.AppID = d.string()
		e.AMQP = p
	}
	e.Reason = d.string()
	if d.err != nil {
		return nil, d.err
	}
	if len(d.buf) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf))
	}
	return e, nil
}

type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = ErrCorrupt
	}
	d.buf = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// count reads a length that must fit in what is left of the input (every element takes at
// least one byte), so a hostile length cannot force a huge allocation.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) raw() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	p := d.buf[:n:n]
	d.buf = d.buf[n:]
	return p
}

func (d *decoder) string() string { return string(d.raw()) }

func (d *decoder) bytes() []byte {
	p := d.raw()
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) < 1 {
		d.fail()
		return 0
	}
	c := d.buf[0]
	d.buf = d.buf[1:]
	return c
}

func (d *decoder) fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.buf) < n {
		d.fail()
		return nil
	}
	p := d.buf[:n]
	d.buf = d.buf[n:]
	return p
}

func (d *decoder) value(depth int) any {
	if depth > maxDepth {
		d.fail()
		return nil
	}
	switch t := d.byte(); t {
	case tNil:
		return nil
	case tString:
		return d.string()
	case tBytes:
		p := d.bytes()
		if p == nil {
			p = []byte{}
		}
		return p
	case tInt8:
		return int8(d.byte())
	case tInt16:
		v := d.varint()
		if v < math.MinInt16 || v > math.MaxInt16 {
			d.fail()
		}
		return int16(v)
	case tInt32:
		v := d.varint()
		if v < math.MinInt32 || v > math.MaxInt32 {
			d.fail()
		}
		return int32(v)
	case tInt64, tInt:
		return d.varint()
	case tUint8:
		return d.byte()
	case tUint16:
		v := d.uvarint()
		if v > math.MaxUint16 {
			d.fail()
		}
		return uint16(v)
	case tUint32:
		v := d.uvarint()
		if v > math.MaxUint32 {
			d.fail()
		}
		return uint32(v)
	case tUint64:
		return d.uvarint()
	case tFloat32:
		p := d.fixed(4)
		if p == nil {
			return nil
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(p))
	case tFloat64:
		p := d.fixed(8)
		if p == nil {
			return nil
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(p))
	case tBool:
		return d.byte() != 0
	case tTime:
		return time.Unix(d.varint(), 0).UTC()
	case tDecimal:
		s := d.byte()
		v := d.varint()
		if v < math.MinInt32 || v > math.MaxInt32 {
			d.fail()
		}
		return Decimal{Scale: s, Value: int32(v)}
	case tTable:
		n := d.count()
		m := make(map[string]any, n)
		for i := 0; i < n && d.err == nil; i++ {
			k := d.string()
			m[k] = d.value(depth + 1)
		}
		return m
	case tArray:
		n := d.count()
		a := make([]any, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			a = append(a, d.value(depth+1))
		}
		return a
	default:
		d.fail()
		return nil
	}
}
