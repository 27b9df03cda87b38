package membership

import (
	"sync"
	"testing"
	"time"
)

func TestAdmissionHoldsOffARestartUnderADeadIncarnationsName(t *testing.T) {
	const ttl = 3000
	now := int64(1_000_000)

	// Nothing under our name (a first start, or one after a graceful Leave), or only a
	// heartbeat older than LookBack: join at once.
	for _, live := range [][]Member{
		{{Name: "b", Heartbeat: now - 100}},
		{{Name: "a", Heartbeat: now - 2*ttl - 1}, {Name: "b", Heartbeat: now - 100}},
		// Alone: nobody would take the share over (b's heartbeat aged out).
		{{Name: "a", Heartbeat: now - 100}, {Name: "b", Heartbeat: now - ttl - 1}},
	} {
		fresh := NewAdmission(ttl * time.Millisecond)
		if !fresh.Admit("a", live, now) {
			t.Fatalf("held off with members %v", live)
		}
		if at, held := fresh.JoinAt(); at != now || held {
			t.Fatalf("JoinAt = %d, %v; want %d, false", at, held, now)
		}
		// A user whose round started before the decision brings an earlier now.
		if !fresh.Joined(now - 5) {
			t.Fatal("a process that joined at once is not joined for a round begun just before")
		}
	}

	// Our name's heartbeat is live: an earlier incarnation died without leaving. Join
	// once it has aged out and a round passed, and once this process has been up a TTL.
	for _, tc := range []struct {
		name   string
		prevHB int64
		want   int64
	}{
		{"heartbeat just before the restart", now - 50, now - 50 + ttl + ttl/3},
		{"heartbeat a round before the restart", now - ttl/3, now + ttl},
		// The incarnation before held off and died without a heartbeat: the one before
		// it is older than a TTL, its share already taken over by the others.
		{"heartbeat two incarnations back", now - 2*ttl, now + ttl},
	} {
		a := NewAdmission(ttl * time.Millisecond)
		live := []Member{{Name: "a", Heartbeat: tc.prevHB}, {Name: "b", Heartbeat: now - 10}}
		if a.Admit("a", live, now) {
			t.Fatalf("%s: admitted at once", tc.name)
		}
		if at, held := a.JoinAt(); at != tc.want || !held {
			t.Fatalf("%s: JoinAt = %d, %v; want %d, true", tc.name, at, held, tc.want)
		}
		// Later looks keep the first decision: our own heartbeat (none while held off,
		// but another user of the Admission may read the members again) changes nothing.
		if a.Joined(tc.want-1) || a.Admit("a", nil, tc.want-1) {
			t.Fatalf("%s: admitted before %d", tc.name, tc.want)
		}
		if !a.Joined(tc.want) || !a.Admit("a", live, tc.want) {
			t.Fatalf("%s: not admitted at %d", tc.name, tc.want)
		}
	}

	var none *Admission
	if !none.Admit("a", []Member{{Name: "a", Heartbeat: now}}, now) || !none.Joined(now) {
		t.Fatal("a nil Admission holds off")
	}
}

// The scheduler and each Kafka source share one Admission: the first look decides for
// all of them, whatever the others read afterwards.
func TestAdmissionFirstLookDecidesForEveryUser(t *testing.T) {
	a := NewAdmission(3 * time.Second)
	now := int64(5_000_000)
	if a.Joined(now) {
		t.Fatal("joined before any look")
	}
	a.Admit("a", nil, now) // the first user finds no earlier incarnation and heartbeats
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Another user reads the members after that heartbeat: not held off.
			if !a.Admit("a", []Member{{Name: "a", Heartbeat: now}}, now+10) {
				t.Error("a later look overrode the first decision")
			}
		}()
	}
	wg.Wait()
}

// TestAdmissionRoundHeartbeatsOnlyOnceAdmitted: while a restart under a dead
// incarnation's name holds off, a round reads the members with LookBack and never
// heartbeats; once the hold-off is over it heartbeats and reads them within the TTL.
func TestAdmissionRoundHeartbeatsOnlyOnceAdmitted(t *testing.T) {
	const ttl = 3 * time.Second
	now := int64(1_000_000)
	a := NewAdmission(ttl)
	var ages []time.Duration
	beats := 0
	live := func(maxAge time.Duration) ([]Member, error) {
		ages = append(ages, maxAge)
		return []Member{{Name: "a", Heartbeat: now - 500}, {Name: "b", Heartbeat: now - 100}}, nil
	}
	heartbeat := func() error { beats++; return nil }

	members, joined, err := a.Round("a", now, ttl, live, heartbeat)
	if err != nil || joined || beats != 0 || len(members) != 2 {
		t.Fatalf("held-off round: members %v, joined %v, err %v, heartbeats %d; want the 2 members read, not joined, no heartbeat", members, joined, err, beats)
	}
	if len(ages) != 1 || ages[0] != a.LookBack() {
		t.Fatalf("held-off round read the members with max ages %v, want [%s]", ages, a.LookBack())
	}
	at, held := a.JoinAt()
	if !held {
		t.Fatal("the first round did not hold off")
	}
	ages = nil
	if _, joined, err = a.Round("a", at, ttl, live, heartbeat); err != nil || !joined || beats != 1 {
		t.Fatalf("round at the join time: joined %v, err %v, heartbeats %d; want joined after one heartbeat", joined, err, beats)
	}
	if len(ages) != 1 || ages[0] != ttl {
		t.Fatalf("admitted round read the members with max ages %v, want [%s]", ages, ttl)
	}
}
