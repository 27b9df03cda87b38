package amqp

import (
	"math"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Table converts envelope headers to an AMQP table (later keys win) and validates it.
func Table(hs []envelope.Header) (amqp.Table, error) {
	t := make(amqp.Table, len(hs))
	for _, h := range hs {
		t[h.Key] = ToAMQP(h.Value)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// ToAMQP converts one envelope header value to a type amqp091-go encodes.
func ToAMQP(v any) any {
	switch x := v.(type) {
	case envelope.Decimal:
		return amqp.Decimal{Scale: x.Scale, Value: x.Value}
	case map[string]any:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = ToAMQP(e)
		}
		return t
	case amqp.Table:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = ToAMQP(e)
		}
		return t
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = ToAMQP(e)
		}
		return a
	case int:
		return int64(x) // amqp091-go would write an int as 32 bits
	case uint:
		return ToAMQP(uint64(x))
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return strconv.FormatUint(x, 10)
	}
	return v
}

// PluginDelay renders the (already negated) x-delay value the way
// rabbitmq_delayed_message_exchange does when it delivers a delayed message: as a signed
// 32-bit integer (int64 when it does not fit), whatever type it arrived as (integer of any
// width, float or decimal truncated, numeric text). A value that is not a number is kept.
func PluginDelay(v any) any {
	n, err := envelope.Millis(v)
	if err != nil {
		return v
	}
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		return int32(n)
	}
	return n
}
