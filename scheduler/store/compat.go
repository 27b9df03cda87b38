package store

import (
	"context"
	"fmt"
	"strconv"
)

// Compat mode: which layout the store writes while bridges of two releases share one
// store (docs/OPERATIONS.md "Upgrading the store layout").
//
// Every instance records its layout in P:{C}:layouts (HASH instance -> layout) with each
// heartbeat; a bridge of the release before layout 3 heartbeats without recording one.
// A store writes layout 3 only while every member it knows of records layout 3: at New,
// every member in P:{C}:members (they are pruned ten heartbeat ages after their last
// heartbeat); afterwards, at each LiveMembers (the scheduler's ownership round), every
// live member. Otherwise it writes layout 2 with that release's own scripts, so an older
// instance sees every done id it must refuse. Both layouts are read whatever is written.

// currentLayout is the data layout this build writes; recordedLevel is what it records
// for itself in P:{C}:layouts. 4 is layout 3 plus what an instance of the release that
// recorded 3 does not know: replace's successors (the nx key, promoted only by this
// release's ack, retry, recover). While a member records 3, a replace of an in-flight id
// is refused as in compat mode, so no successor is left for an old ack to forget.
//
// 5 adds the cold tier (lua/cold.lua): pending messages due far ahead live in bucket
// lists that only this release promotes and finds by id. While a member records less,
// every message is parked in due as before (what is cold already is still served by
// the instances of this release).
const (
	currentLayout   = layoutV3
	recordedLevel   = 5
	levelSuccessors = 4
	levelCold       = 5
)

// coldHorizon is the park scripts' cold horizon argument (ms): -1 while the cold tier
// is off (an older member, layout 2, or Options.Cold.Horizon < 0).
func (s *Store) coldHorizon() int64 {
	if s.opt.Cold.Horizon < 0 || !s.cold.Load() || s.writing() == layoutV2 {
		return -1
	}
	return s.opt.Cold.Horizon.Milliseconds()
}

// WritingLayout is the store layout this store writes now: 3, or 2 while a member of an
// older release is alive (compat mode).
func (s *Store) WritingLayout() int { return s.writing() }

// initLayout decides the layout at New from every recorded member.
func (s *Store) initLayout(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	members := pipe.ZRange(ctx, s.membersKey, 0, -1)
	layouts := pipe.HGetAll(ctx, s.layoutsKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("scheduler: read the members' layouts: %w", redisErr(err))
	}
	s.decideLayout(members.Val(), layouts.Val())
	return nil
}

// decideLayout writes layout 3 when every one of names records at least layout 3 in
// recorded, else layout 2; a forced layout stays.
func (s *Store) decideLayout(names []string, recorded map[string]string) {
	if s.forced.Load() {
		return
	}
	l, older, olderCold := currentLayout, "", ""
	succ, cold := true, true
	for _, name := range names {
		v, err := strconv.Atoi(recorded[name])
		if err != nil || v < layoutV3 {
			l, older, succ, cold = layoutV2, name, false, false
			break
		}
		if v < levelSuccessors {
			succ, older = false, name
		}
		if v < levelCold {
			cold, olderCold = false, name
		}
	}
	if prev := s.cold.Swap(cold); prev != cold && s.opt.Logger != nil && l == currentLayout {
		if cold {
			s.opt.Logger.Info("store layout: cold tier on, every member records level 5")
		} else {
			s.opt.Logger.Info("store layout: cold tier off for new messages while an instance of an older release is a member",
				"member", olderCold)
		}
	}
	if prev := s.successors.Swap(succ); prev != succ && s.opt.Logger != nil && l == currentLayout {
		if succ {
			s.opt.Logger.Info("store layout: replacing in-flight ids (successors) on, every member records level 4")
		} else {
			s.opt.Logger.Info("store layout: replacing in-flight ids (successors) off while an instance of an older release is a member",
				"member", older)
		}
	}
	if prev := s.layout.Swap(int32(l)); int(prev) != l && s.opt.Logger != nil {
		if l == layoutV2 {
			s.opt.Logger.Info("store layout: writing layout 2 (compat mode) while an instance of an older release is a member",
				"member", older)
		} else if prev != 0 {
			s.opt.Logger.Info("store layout: writing layout 3, every member records it")
		}
	}
}
