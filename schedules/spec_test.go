package schedules

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones, as the binary embeds them (not the machine's)

	"github.com/delaybridge/delay-bridge/internal/observe"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func slotsUTC(t *testing.T, spec, from, to string) []string {
	t.Helper()
	d := Definition{ID: "s", Route: "r", Spec: spec}
	sp, err := d.Validate()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := d.Slots(sp, mustTime(t, from).UnixMilli(), mustTime(t, to).UnixMilli(), 100)
	out := make([]string, len(got))
	for i, s := range got {
		out[i] = time.UnixMilli(s).UTC().Format(time.RFC3339)
	}
	return out
}

func sameList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// TestDST pins what a daily 02:30 (Europe/Berlin, America/New_York) does on the days the
// clocks change, as docs/CONTRACT.md "Recurring schedules" states: a wall-clock time
// that does not exist (spring forward) has no slot that day; one that exists twice
// (autumn) has two slots, one per instant. A slot is an instant whose local time
// matches the expression (robfig/cron's rule).
func TestDST(t *testing.T) {
	// Berlin springs forward on 2026-03-29 at 02:00 CET to 03:00 CEST: 02:30 never happens.
	sameList(t, "Berlin spring forward", slotsUTC(t, "CRON_TZ=Europe/Berlin 30 2 * * *", "2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z"),
		[]string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"})
	// Berlin falls back on 2026-10-25 at 03:00 CEST to 02:00 CET: 02:30 happens twice.
	sameList(t, "Berlin fall back", slotsUTC(t, "CRON_TZ=Europe/Berlin 30 2 * * *", "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z"),
		[]string{"2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-26T01:30:00Z"})
	// New York springs forward on 2026-03-08 at 02:00 EST to 03:00 EDT.
	sameList(t, "New York spring forward", slotsUTC(t, "CRON_TZ=America/New_York 30 2 * * *", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z"),
		[]string{"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"})
	// New York falls back on 2026-11-01 at 02:00 EDT to 01:00 EST: 01:30 happens twice,
	// 02:30 once.
	sameList(t, "New York fall back 01:30", slotsUTC(t, "CRON_TZ=America/New_York 30 1 * * *", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z"),
		[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"})
	sameList(t, "New York fall back 02:30", slotsUTC(t, "CRON_TZ=America/New_York 30 2 * * *", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z"),
		[]string{"2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"})
	// Without CRON_TZ the expression is UTC.
	sameList(t, "UTC", slotsUTC(t, "30 2 * * *", "2026-03-28T00:00:00Z", "2026-03-30T00:00:00Z"),
		[]string{"2026-03-28T02:30:00Z", "2026-03-29T02:30:00Z"})
}

func TestSpecForms(t *testing.T) {
	sameList(t, "6 fields (seconds)", slotsUTC(t, "*/20 * * * * *", "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"),
		[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"})
	sameList(t, "@every is anchored at the epoch", slotsUTC(t, "@every 1h", "2026-01-01T00:10:00Z", "2026-01-01T02:00:00Z"),
		[]string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"})
	sameList(t, "@at", slotsUTC(t, "@at 2026-01-02T00:00:00Z, 2026-01-01T12:00:00+01:00", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
		[]string{"2026-01-01T11:00:00Z", "2026-01-02T00:00:00Z"})
	d := Definition{ID: "s", Route: "r", Spec: "@every 10m", Start: mustTime(t, "2026-01-01T00:03:00Z"), End: mustTime(t, "2026-01-01T00:30:00Z")}
	sp, err := d.Validate()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := d.Slots(sp, 0, mustTime(t, "2027-01-01T00:00:00Z").UnixMilli(), 100)
	if len(got) != 3 || time.UnixMilli(got[0]).UTC().Minute() != 3 || time.UnixMilli(got[2]).UTC().Minute() != 23 {
		t.Fatalf("@every anchored at start, cut at end: %v", got)
	}
	for _, bad := range []Definition{
		{ID: "a", Route: "r", Spec: "61 * * * *"},
		{ID: "a", Route: "r", Spec: "@every 10ms"},
		{ID: "a", Route: "r", Spec: "CRON_TZ=Mars/Olympus 0 2 * * *"},
		{ID: "a@b", Route: "r", Spec: "@every 1s"},
		{ID: "a", Spec: "@every 1s"},
		{ID: "a", Route: "r", Spec: "@every 1s", CatchUp: "most"},
		{ID: "a", Route: "r", Spec: "@at yesterday"},
	} {
		if _, err := bad.Validate(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}

func TestOccurrenceIDAndJitter(t *testing.T) {
	if id := OccurrenceID("nightly", 1700000000000, 1); id != "nightly@1700000000000" {
		t.Fatalf("first generation id %q", id)
	}
	if id := OccurrenceID("nightly", 1700000000000, 3); id != "nightly@1700000000000~3" {
		t.Fatalf("edited generation id %q", id)
	}
	if s, slot, ok := SlotOf("a@b@1700000000000~3"); !ok || s != "a@b" || slot != 1700000000000 {
		t.Fatalf("SlotOf: %q %d %v", s, slot, ok)
	}
	d := Definition{ID: "j", JitterMs: 60_000}
	spread := map[int64]bool{}
	for slot := int64(0); slot < 100*60_000; slot += 60_000 {
		due := d.Due(slot)
		if due < slot || due > slot+60_000 {
			t.Fatalf("jitter out of range: slot %d due %d", slot, due)
		}
		if due != (&Definition{ID: "j", JitterMs: 60_000}).Due(slot) {
			t.Fatal("jitter is not deterministic")
		}
		spread[due-slot] = true
	}
	if len(spread) < 50 {
		t.Fatalf("jitter hardly varies: %d distinct offsets in 100 slots", len(spread))
	}
}

// TestCatchUpAfterThreeHoursDown: an hourly-and-every-minute schedule planned last
// three hours ago; what each policy does with the passed slots.
func TestCatchUpAfterThreeHoursDown(t *testing.T) {
	down := mustTime(t, "2026-06-01T09:00:30Z")
	now := down.Add(3 * time.Hour)
	w := Window{After: down.UnixMilli(), Now: now.UnixMilli(), Grace: 5000, Horizon: 60_000, Max: 1000}
	for _, tc := range []struct {
		policy           string
		limit            int
		late, missed     int
		firstLate        string
		parkedAfterGrace int
	}{
		{CatchUpSkip, 0, 0, 180, "", 1},
		{CatchUpOne, 0, 1, 179, "2026-06-01T12:00:00Z", 1},
		{CatchUpAll, 0, 100, 80, "2026-06-01T10:21:00Z", 1}, // the default bound: the latest 100
		{CatchUpAll, 500, 180, 0, "2026-06-01T09:01:00Z", 1},
	} {
		d := Definition{ID: "m", Route: "r", Spec: "0 * * * * *", CatchUp: tc.policy, CatchUpLimit: tc.limit}
		sp, err := d.Validate()
		if err != nil {
			t.Fatal(err)
		}
		ds, skipped, through := Decide(&d, sp, w, true)
		late, parked := 0, 0
		first := ""
		for _, x := range ds {
			switch x.Outcome {
			case observe.SlotLate:
				if late == 0 {
					first = time.UnixMilli(x.Slot).UTC().Format(time.RFC3339)
				}
				late++
			case observe.SlotParked:
				parked++
				if x.Slot <= now.UnixMilli()-5000 {
					t.Errorf("%s: slot %d parked as if on time", tc.policy, x.Slot)
				}
			}
		}
		if late != tc.late || skipped != tc.missed || first != tc.firstLate || parked != tc.parkedAfterGrace || through != now.UnixMilli()+60_000 {
			t.Errorf("%s/%d: late %d (first %s), missed %d, parked %d, through %d; want late %d (first %s), missed %d, parked %d",
				tc.policy, tc.limit, late, first, skipped, parked, through, tc.late, tc.firstLate, tc.missed, tc.parkedAfterGrace)
		}
	}
	// Without a route every slot is reported, none parked.
	d := Definition{ID: "m", Route: "gone", Spec: "0 * * * * *", CatchUp: CatchUpOne}
	sp, _ := d.Validate()
	ds, _, _ := Decide(&d, sp, w, false)
	for _, x := range ds {
		if x.Outcome != observe.SlotNoRoute {
			t.Fatalf("route gone: outcome %s", x.Outcome)
		}
	}
}
