package membership

import (
	"fmt"
	"sync"
	"time"
)

// Admission decides when a process takes its share of shards and partitions: at once,
// unless it restarts under the name of an incarnation that died without leaving (a
// heartbeat of its name at most LookBack old when the process first looks: two lease
// TTLs, so a restart that follows one which held off and died before it heartbeated is
// caught too). Then the process holds off — it neither heartbeats nor wants anything —
// until
//
//   - the old heartbeat has aged out of everyone's view and one ownership round
//     (LeaseTTL/3) has passed, so the other members see the dead incarnation gone and
//     take its share as soon as its leases expire, instead of waiting for a successor
//     that may die before it fires what it takes (a crash loop under a stable pod
//     name); and
//   - the process itself has been up for a LeaseTTL: an incarnation that dies sooner
//     never takes anything a failover would have to take back.
//
// Once admitted it heartbeats, and the others hand its share over gracefully (no lease
// expiry, no lateness). A process with no other live member joins at once: nobody
// would take its share over. A failover thus serves a dead instance's share again within about the
// lease TTL however often the instance restarts. One Admission is shared by every
// user of the membership in a process (the scheduler's shards, each Kafka source's
// partitions), so they join together. A nil *Admission admits at once. Safe for
// concurrent use.
type Admission struct {
	ttl int64 // ms

	mu     sync.Mutex
	joinAt int64 // unix ms; 0 until the first look
	held   bool  // the first look found a previous incarnation
}

// NewAdmission returns an Admission for members that age out after ttl (the lease TTL).
func NewAdmission(ttl time.Duration) *Admission {
	return &Admission{ttl: ttl.Milliseconds()}
}

// LookBack is the maxAge with which to read the members handed to Admit: two lease
// TTLs.
func (a *Admission) LookBack() time.Duration {
	if a == nil {
		return 0
	}
	return 2 * time.Duration(a.ttl) * time.Millisecond
}

// Admit reports whether the process named instance takes its share at now (unix ms).
// live is the members read before this process's first heartbeat (Live with maxAge
// LookBack); the first call decides, later ones only compare now with the moment
// decided (their live is ignored, and may be nil).
func (a *Admission) Admit(instance string, live []Member, now int64) bool {
	if a == nil {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.joinAt == 0 {
		a.joinAt = now
		var prev int64 // the earlier incarnation's heartbeat, 0: none
		others := false
		for _, m := range live {
			switch {
			case m.Name == instance && m.Heartbeat >= now-2*a.ttl:
				prev = m.Heartbeat
			case m.Name != instance && m.Heartbeat >= now-a.ttl:
				others = true
			}
		}
		// Alone (a single replica, a sidecar), nobody would take the share over: the
		// process takes it as the old leases expire, as it would without a hold-off.
		if prev > 0 && others {
			a.joinAt = max(now+a.ttl, prev+a.ttl+a.ttl/3)
			a.held = true
		}
	}
	return a.admitted(now)
}

// Joined reports whether the process is admitted at now: a first call to Admit
// decided, and it joined at once or now is at or past the moment it decided.
func (a *Admission) Joined(now int64) bool {
	if a == nil {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.joinAt != 0 && a.admitted(now)
}

// admitted: with a.mu held and the decision made. A process that joined at once is
// admitted whatever now a caller brings (one that took its time before a round
// started may come with a now before the decision).
func (a *Admission) admitted(now int64) bool {
	return !a.held || now >= a.joinAt
}

// JoinAt is the moment (unix ms) the process joins and whether it holds off at all
// (a previous incarnation's heartbeat was live at its first look); 0, false before the
// first Admit.
func (a *Admission) JoinAt() (at int64, heldOff bool) {
	if a == nil {
		return 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.joinAt, a.held
}

// Round is one ownership round's membership step under the admission, shared by every
// engine that owns by rendezvous (the scheduler's shards, each Kafka source's
// partitions): until the process is admitted it reads the members (LookBack) without
// heartbeating and lets Admit decide; once admitted it heartbeats and reads the members
// live within ttl. joined reports whether this round heartbeated and read them; false
// with a nil error means the process holds off (members are then the ones Admit read).
// live reads the members heartbeating within maxAge; heartbeat records this process's.
func (a *Admission) Round(instance string, now int64, ttl time.Duration,
	live func(maxAge time.Duration) ([]Member, error), heartbeat func() error) (members []Member, joined bool, err error) {
	if !a.Joined(now) {
		seen, err := live(a.LookBack())
		if err != nil {
			return nil, false, err
		}
		if !a.Admit(instance, seen, now) {
			return seen, false, nil
		}
	}
	if err := heartbeat(); err != nil {
		return nil, false, fmt.Errorf("heartbeat: %w", err)
	}
	members, err = live(ttl)
	return members, err == nil, err
}
