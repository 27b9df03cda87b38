package envelope

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrOutOfRange marks a well-formed number too large to be a number of milliseconds.
var ErrOutOfRange = errors.New("out of range")

// Millis reads a number of milliseconds in any form an AMQP table or a Kafka header
// carries: integers of any width and sign, floats and decimals (truncated toward zero,
// as the delayed-message plugin does), and numeric text. A well-formed number too large
// for int64 milliseconds is ErrOutOfRange; anything below -2^62 reads as -1 (for a delay,
// any negative value means "due now"). Ingress reads x-delay with it; the AMQP sink
// re-types the negated x-delay with it.
func Millis(v any) (int64, error) {
	switch x := v.(type) {
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, ErrOutOfRange
		}
		return int64(x), nil
	case float32:
		return floatMs(float64(x))
	case float64:
		return floatMs(x)
	case Decimal:
		f := float64(x.Value) / math.Pow10(int(x.Scale))
		return floatMs(f)
	case string:
		return textMs(x)
	case []byte:
		return textMs(string(x))
	case nil:
		return 0, fmt.Errorf("empty value")
	}
	return 0, fmt.Errorf("unsupported type %T", v)
}

func floatMs(f float64) (int64, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return 0, fmt.Errorf("not a finite number of milliseconds")
	case f > math.MaxInt64/2:
		return 0, ErrOutOfRange
	case f < math.MinInt64/2:
		return -1, nil // any negative delay means "due now"
	}
	return int64(f), nil // truncation toward zero, as the plugin does
}

func textMs(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty value")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if errors.Is(err, strconv.ErrRange) && math.IsInf(f, 0) && !strings.ContainsAny(s, "iI") {
		err = nil // a well-formed number beyond float64: ±Inf, classified by floatMs below
		f = math.Copysign(math.MaxFloat64, f)
	}
	if err != nil {
		return 0, fmt.Errorf("not a number of milliseconds")
	}
	return floatMs(f)
}

// MinUnixMillis is 2000-01-01T00:00:00Z in unix milliseconds. An absolute time given as
// a number below it is not unix milliseconds of this century: most likely unix seconds
// (10 digits), which read as milliseconds would be a date in 1970 and fire at once. Such a
// number is refused (x-deliver-at: bad_deliver_at; HTTP deliver_at: 400).
const MinUnixMillis int64 = 946_684_800_000

// CheckUnixMillis returns an error saying what is wrong when ms, given as a number, is too
// small to be unix milliseconds (see MinUnixMillis).
func CheckUnixMillis(ms int64) error {
	if ms >= MinUnixMillis {
		return nil
	}
	if ms > 0 && ms < 100_000_000_000 {
		return fmt.Errorf("%d is not unix milliseconds of this century (unix seconds? multiply by 1000)", ms)
	}
	return fmt.Errorf("%d is not unix milliseconds of this century (want at least %d, 2000-01-01T00:00:00Z)", ms, MinUnixMillis)
}
