package egress

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends rc as JSON, the same document encoding/json makes of it (field
// order, omitted empty fields) without reflection: receipts are made on a dispatcher
// worker, where json.Marshal was a quarter of the CPU with receipts on
// (BenchmarkDispatcherReceipts). Strings are escaped as JSON requires; one that is not
// valid UTF-8 goes through encoding/json (which replaces the invalid bytes).
func (rc *Receipt) AppendJSON(b []byte) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(rc.V), 10)
	b = appendField(b, "outcome", rc.Outcome, false)
	b = appendField(b, "id", rc.ID, false)
	b = appendField(b, "route", rc.Route, false)
	b = appendField(b, "at", rc.At, false)
	b = appendField(b, "due_at", rc.DueAt, true)
	b = appendField(b, "published_at", rc.PublishedAt, true)
	if rc.LatenessMs != nil {
		b = append(b, `,"lateness_ms":`...)
		b = strconv.AppendInt(b, *rc.LatenessMs, 10)
	}
	if t := rc.Target; t != nil {
		b = append(b, `,"target":{"broker":`...)
		b = appendString(b, t.Broker)
		b = appendField(b, "topic", t.Topic, true)
		b = appendField(b, "exchange", t.Exchange, true)
		b = appendField(b, "routing_key", t.RoutingKey, true)
		if t.Partition != nil {
			b = append(b, `,"partition":`...)
			b = strconv.AppendInt(b, int64(*t.Partition), 10)
		}
		if t.Offset != nil {
			b = append(b, `,"offset":`...)
			b = strconv.AppendInt(b, *t.Offset, 10)
		}
		b = append(b, '}')
	}
	b = appendField(b, "reason", rc.Reason, true)
	if rc.Attempts != nil {
		b = append(b, `,"attempts":`...)
		b = strconv.AppendInt(b, int64(*rc.Attempts), 10)
	}
	b = appendField(b, "traceparent", rc.Traceparent, true)
	b = appendField(b, "correlation_id", rc.Correlation, true)
	return append(b, '}')
}

// appendField appends ,"name":"v" (nothing when omitEmpty and v is "").
func appendField(b []byte, name, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		q, _ := json.Marshal(s) // a string always marshals
		return append(b, q...)
	}
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
