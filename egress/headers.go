package egress

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// OutgoingHeaders returns the headers to publish env with (docs/CONTRACT.md §2): every original
// header kept in order, x-delay rewritten to its negative (the delayed-message plugin's
// loop guard, so a republish to a delay exchange does not delay again), and x-message-id,
// x-delay-due-at, x-delay-source and x-delay-attempt set. attempt is 1 for the first
// publish. Values are typed (int64 for the numbers we add); Kafka sinks turn them into
// bytes with HeaderBytes, AMQP sinks put them in the table as they are.
func OutgoingHeaders(env *envelope.Envelope, attempt int32) []envelope.Header {
	out := make([]envelope.Header, 0, len(env.Headers)+4)
	for _, h := range env.Headers {
		switch h.Key {
		case envelope.HeaderMessageID, envelope.HeaderDueAt, envelope.HeaderSource, envelope.HeaderAttempt:
			continue // replaced below
		case envelope.HeaderDelay:
			out = append(out, envelope.Header{Key: h.Key, Value: negate(h.Value)})
		default:
			out = append(out, h)
		}
	}
	return append(out,
		envelope.Header{Key: envelope.HeaderMessageID, Value: env.ID},
		envelope.Header{Key: envelope.HeaderDueAt, Value: env.DueAt},
		envelope.Header{Key: envelope.HeaderSource, Value: env.Source},
		envelope.Header{Key: envelope.HeaderAttempt, Value: int64(attempt)},
	)
}

// NegateDelay is the outgoing value of an x-delay header of value v (see negate), for
// sinks that render OutgoingHeaders themselves.
func NegateDelay(v any) any { return negate(v) }

// AppendNegatedDelayText appends the outgoing bytes of an x-delay header whose value is
// the text s, NegateDelay(s)'s, to dst without making that string first.
func AppendNegatedDelayText(dst []byte, s string) []byte {
	if b, ok := appendNegText(dst, s); ok {
		return b
	}
	return append(dst, s...)
}

// negate returns -|v| keeping v's type where it can carry a sign; text stays text (Kafka
// producers send text), unsigned and unparsable values become an int64.
func negate(v any) any {
	abs := func(x int64) int64 {
		if x < 0 {
			return x
		}
		return -x
	}
	switch x := v.(type) {
	case int8:
		return int8(abs(int64(x)))
	case int16:
		return int16(abs(int64(x)))
	case int32:
		return int32(abs(int64(x)))
	case int64:
		return abs(x)
	case int:
		return abs(int64(x))
	case uint8:
		return abs(int64(x))
	case uint16:
		return abs(int64(x))
	case uint32:
		return abs(int64(x))
	case uint64:
		if x > math.MaxInt64 {
			return int64(-math.MaxInt64)
		}
		return abs(int64(x))
	case float32:
		return float32(negFloat(float64(x)))
	case float64:
		return negFloat(x)
	case envelope.Decimal:
		if x.Value > 0 {
			x.Value = -x.Value
		}
		return x
	case string:
		if n, ok := negText(x); ok {
			return n
		}
		return x
	case []byte:
		if b, ok := appendNegText(nil, string(x)); ok {
			return b
		}
		return x
	}
	return v
}

// negFloat truncates toward zero and negates, without an int64 conversion (undefined for
// NaN, infinities and values beyond int64). NaN stays NaN.
func negFloat(f float64) float64 {
	if math.IsNaN(f) {
		return f
	}
	n := -math.Abs(math.Trunc(f))
	if n == 0 {
		return 0 // not -0
	}
	return n
}

// negText negates a delay written as text, accepting what ingress accepts (surrounding
// blanks, a sign, a fraction, an exponent); integers stay exact. ok is false for text
// that is not a finite number, which is left unchanged.
func negText(s string) (string, bool) {
	b, ok := appendNegText(nil, s)
	if !ok {
		return s, false
	}
	return string(b), true
}

// appendNegText appends negText(s)'s text to dst; ok as negText's.
func appendNegText(dst []byte, s string) ([]byte, bool) {
	t := strings.TrimSpace(s)
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n > 0 {
			n = -n
		}
		return strconv.AppendInt(dst, n, 10), true
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	n := negFloat(f)
	if n < math.MinInt64 {
		return strconv.AppendFloat(dst, n, 'f', 0, 64), true
	}
	return strconv.AppendInt(dst, int64(n), 10), true
}

// HeaderBytes renders a typed header value as Kafka header bytes: text and bytes as they
// are, numbers in decimal, booleans as true/false, times as RFC 3339, tables and arrays
// as JSON.
func HeaderBytes(v any) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return x // as it is, not copied
	}
	return AppendHeaderBytes([]byte{}, v) // non-nil: an empty text is not a null value
}

// AppendHeaderBytes appends HeaderBytes(v) to dst, so that a sink can render all of a
// message's header values into one buffer (one allocation per message, not per header).
func AppendHeaderBytes(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return dst
	case string:
		return append(dst, x...)
	case []byte:
		return append(dst, x...)
	case int64:
		return strconv.AppendInt(dst, x, 10)
	case int:
		return strconv.AppendInt(dst, int64(x), 10)
	case int32:
		return strconv.AppendInt(dst, int64(x), 10)
	case int16:
		return strconv.AppendInt(dst, int64(x), 10)
	case int8:
		return strconv.AppendInt(dst, int64(x), 10)
	case uint64:
		return strconv.AppendUint(dst, x, 10)
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10)
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10)
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10)
	case float32:
		return strconv.AppendFloat(dst, float64(x), 'g', -1, 32)
	case float64:
		return strconv.AppendFloat(dst, x, 'g', -1, 64)
	case bool:
		return strconv.AppendBool(dst, x)
	case time.Time:
		return x.UTC().AppendFormat(dst, time.RFC3339)
	case envelope.Decimal:
		return append(dst, decimalText(x)...)
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return fmt.Append(dst, x)
		}
		return append(dst, b...)
	}
}

func decimalText(d envelope.Decimal) string {
	s := strconv.FormatInt(int64(d.Value), 10)
	if d.Scale == 0 {
		return s
	}
	neg := d.Value < 0
	if neg {
		s = s[1:]
	}
	for len(s) <= int(d.Scale) {
		s = "0" + s
	}
	s = s[:len(s)-int(d.Scale)] + "." + s[len(s)-int(d.Scale):]
	if neg {
		s = "-" + s
	}
	return s
}
