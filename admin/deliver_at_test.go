package admin

import (
	"net/http"
	"testing"
)

// deliver_at given as a number too small to be unix milliseconds of this century (10
// digits: unix seconds) is refused with 400 naming deliver_at, never scheduled in 1970
// (that is, at once): on schedule and on reschedule, as a JSON number or a numeric string.
func TestDeliverAtInUnixSecondsIsRefused(t *testing.T) {
	f := newFake()
	s := newTestServer(f, "")
	do(t, s, "POST", "/v1/messages", `{"id":"r1","route":"orders","delay_ms":60000}`).expect(t, http.StatusCreated)
	for _, da := range []string{`1700000000`, `"1700000000"`, `1700000000.5`, `5`, `"946684799999"`, `0`, `-1`} {
		f.lastReq = ScheduleRequest{}
		r := do(t, s, "POST", "/v1/messages", `{"route":"orders","deliver_at":`+da+`}`)
		r.expectError(t, http.StatusBadRequest, "deliver_at", "unix milliseconds")
		if f.lastReq.Route != "" {
			t.Errorf("deliver_at %s reached the backend: %+v", da, f.lastReq)
		}
		do(t, s, "POST", "/v1/messages/r1/reschedule", `{"deliver_at":`+da+`}`).
			expectError(t, http.StatusBadRequest, "deliver_at", "unix milliseconds")
	}
	r := do(t, s, "POST", "/v1/messages", `{"route":"orders","deliver_at":1700000000}`)
	r.expectError(t, http.StatusBadRequest, "deliver_at", "unix seconds")
	// The first millisecond of 2000 is accepted.
	do(t, s, "POST", "/v1/messages", `{"route":"orders","deliver_at":946684800000}`).expect(t, http.StatusCreated, "due_at")

	if _, err := ParseTime("1700000000"); err == nil {
		t.Error("ParseTime accepted unix seconds")
	}
}
