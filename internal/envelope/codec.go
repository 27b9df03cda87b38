package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"
)

// The envelope's binary form starts with a version byte. Encode writes the current
// version (2, codec_v2.go) and Decode reads it; 1 was a pre-release format and reads as
// corrupt. A new version gets a new byte and its own file, and Decode keeps reading the
// one before it, so messages parked by the previous release still fire after an
// upgrade; an existing version's layout never changes.
const version2 = 2

// ErrCorrupt is returned by Decode for input that is not a valid envelope.
var ErrCorrupt = errors.New("envelope: corrupt encoding")

// ErrNewerVersion is returned by Decode for an envelope whose version byte is above the
// versions this build knows: a newer bridge parked it (a rolling upgrade in progress).
// It is not corrupt; a caller must leave it for an instance that can read it.
var ErrNewerVersion = errors.New("envelope: written by a newer bridge version")

// maxPlausibleVersion bounds the version bytes taken for a newer format rather than
// garbage: versions are allocated one at a time, so a byte far above the current one
// is corruption.
const maxPlausibleVersion = 16

// maxDepth bounds nesting of AMQP tables/arrays so hostile input cannot blow the stack.
const maxDepth = 32

// Header value type tags. A value is its tag followed by its encoding (see appendValue).
// tDelayText is valid only at the top level.
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

	// tDecText: a string that is the canonical decimal text of an int64 ("5000",
	// "-1", not "05000", "+5" or " 5"), stored as a varint and decoded back to exactly
	// that text. Kafka header values are text, and most numeric ones are like this.
	tDecText = 19
	// tDelayText: the same for the top-level x-delay header, stored as the varint
	// difference between the number and the envelope's own DueAt - ReceivedAt (its
	// delay as parked). For a Kafka record that difference is the consumer's lag behind
	// the record timestamp, usually a byte. Decoded back to exactly the original text.
	tDelayText = 20
)

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// appendValue appends v with its type tag; canonical decimal text is stored as tDecText.
func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errors.New("nesting too deep")
	}
	switch x := v.(type) {
	case nil:
		return append(b, tNil), nil
	case string:
		if n, ok := decText(x); ok {
			return binary.AppendVarint(append(b, tDecText), n), nil
		}
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

// decText reports whether s is the canonical decimal text of an int64 (what
// strconv.FormatInt gives back), and the number.
func decText(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 20 || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	var buf [20]byte // the comparison converts without allocating: Encode's hot path
	if string(strconv.AppendInt(buf[:0], n, 10)) != s {
		return 0, false
	}
	return n, true
}

// Decode parses an envelope stored under id (the msg hash field). The envelope does not
// carry its id: it gets id.
func Decode(data []byte, id string) (*Envelope, error) {
	return decode(data, "", id)
}

// DecodeString is Decode of an envelope held in a string (as a Redis reply holds it)
// without copying it first: the strings of a version 2 envelope (route, source, header
// keys and string values, …) are substrings of data, and its Payload and Key are views of
// data's bytes — read-only memory: nothing may modify them in place (nothing does: the
// sinks only read them). The envelope then keeps data alive, about the memory Decode's
// copies would take. The claim path decodes its envelopes so (BenchmarkDecode).
func DecodeString(data string, id string) (*Envelope, error) {
	return decode(unsafe.Slice(unsafe.StringData(data), len(data)), data, id)
}

// decode is Decode; s, when not empty, is data as a string that outlives the envelope
// (DecodeString).
func decode(data []byte, s string, id string) (*Envelope, error) {
	if len(data) < 2 {
		return nil, ErrCorrupt
	}
	var e *Envelope
	var err error
	switch data[0] {
	case version2:
		e, err = decodeV2(data[1:], s)
	default:
		if data[0] > version2 && data[0] <= maxPlausibleVersion {
			return nil, fmt.Errorf("%w: version %d (this build reads up to %d)", ErrNewerVersion, data[0], version2)
		}
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorrupt, data[0])
	}
	if err != nil {
		return nil, err
	}
	if id != "" {
		e.ID = id
	}
	return e, nil
}

type decoder struct {
	buf []byte
	err error
	ref int64 // DueAt - ReceivedAt, the base of tDelayText
	// src, when not empty, is the whole input as an immutable string ending where buf
	// ends (DecodeString): strings and byte fields are taken from it without copying.
	src string
}

// finish returns e if the whole input was read without error.
func (d *decoder) finish(e *Envelope) (*Envelope, error) {
	if d.err != nil {
		return nil, d.err
	}
	if len(d.buf) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf))
	}
	return e, nil
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

func (d *decoder) string() string { return d.stringOf(d.raw()) }

// stringOf is p, which raw just read, as a string: a substring of src when decoding a
// string (DecodeString), else a copy.
func (d *decoder) stringOf(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	if d.src == "" {
		return string(p)
	}
	off := len(d.src) - len(d.buf) - len(p) // raw has moved buf past p
	return d.src[off : off+len(p)]
}

// internedString is string for a field with few distinct values (route, target): the
// interned copy (interner), or string's when the interner is full.
func (d *decoder) internedString() string {
	p := d.raw()
	if len(p) == 0 {
		return ""
	}
	if s, ok := interned.get(p); ok {
		return s
	}
	return d.stringOf(p)
}

func (d *decoder) bytes() []byte {
	p := d.raw()
	if len(p) == 0 {
		return nil
	}
	if d.src != "" {
		return p // a view of the immutable input (DecodeString)
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

// fixedString is string(d.fixed(n)), a substring of the input under DecodeString.
func (d *decoder) fixedString(n int) string {
	p := d.fixed(n)
	if d.src == "" || len(p) == 0 {
		return string(p)
	}
	off := len(d.src) - len(d.buf) - len(p)
	return d.src[off : off+len(p)]
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
	case tDecText:
		return strconv.FormatInt(d.varint(), 10)
	case tDelayText:
		if depth != 0 {
			d.fail()
			return nil
		}
		return strconv.FormatInt(d.varint()+d.ref, 10) // wraps like the encoder's difference
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
