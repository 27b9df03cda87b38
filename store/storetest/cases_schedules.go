package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

func init() {
	register("Schedules", caseSchedules)
}

// caseSchedules: definitions by id with generations that only grow (also across a
// delete), plans stored only for the current generation, deletes that return what was
// there.
func caseSchedules(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(Config{Shards: 4}).Store
	ctx := context.Background()
	if _, err := s.GetSchedule(ctx, "nightly"); !errors.Is(err, storeapi.ErrNotFound) {
		t.Fatalf("get of an unknown schedule: %v, want ErrNotFound", err)
	}
	if _, err := s.PutSchedule(ctx, "", []byte("x"), 1); !errors.Is(err, storeapi.ErrInvalid) {
		t.Fatalf("put with an empty id: %v, want ErrInvalid", err)
	}
	g1, err := s.PutSchedule(ctx, "nightly", []byte(`{"spec":"a:b"}`), 1000)
	if err != nil || g1 < 1 {
		t.Fatalf("put: gen %d, %v", g1, err)
	}
	if ok, err := s.SaveSchedulePlan(ctx, "nightly", g1, []byte("plan-1")); !ok || err != nil {
		t.Fatalf("save plan of the current generation: %v %v", ok, err)
	}
	rec, err := s.GetSchedule(ctx, "nightly")
	if err != nil || string(rec.Def) != `{"spec":"a:b"}` || rec.Gen != g1 || rec.Updated != 1000 || string(rec.Plan) != "plan-1" || rec.PlanGen != g1 {
		t.Fatalf("get: %+v %v", rec, err)
	}
	g2, err := s.PutSchedule(ctx, "nightly", []byte(`{"spec":"c"}`), 2000)
	if err != nil || g2 <= g1 {
		t.Fatalf("second put: gen %d after %d, %v", g2, g1, err)
	}
	if ok, err := s.SaveSchedulePlan(ctx, "nightly", g1, []byte("stale")); ok || err != nil {
		t.Fatalf("save plan of an old generation: stored=%v %v, want refused", ok, err)
	}
	rec, _ = s.GetSchedule(ctx, "nightly")
	if rec.Gen != g2 || string(rec.Plan) != "plan-1" || rec.PlanGen != g1 || rec.Updated != 2000 {
		t.Fatalf("after the edit: %+v, want gen %d with the plan of gen %d", rec, g2, g1)
	}
	if _, err := s.PutSchedule(ctx, "hourly", []byte("h"), 3000); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSchedules(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "hourly" || list[1].ID != "nightly" || string(list[1].Plan) != "plan-1" {
		t.Fatalf("list: %+v %v", list, err)
	}
	del, err := s.DeleteSchedule(ctx, "nightly")
	if err != nil || del.Gen != g2 || string(del.Plan) != "plan-1" || string(del.Def) != `{"spec":"c"}` {
		t.Fatalf("delete returned %+v %v", del, err)
	}
	if _, err := s.DeleteSchedule(ctx, "nightly"); !errors.Is(err, storeapi.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if ok, _ := s.SaveSchedulePlan(ctx, "nightly", g2, []byte("late")); ok {
		t.Fatal("a plan was saved for a deleted schedule")
	}
	g3, err := s.PutSchedule(ctx, "nightly", []byte("again"), 4000)
	if err != nil || g3 <= g2 {
		t.Fatalf("put after delete: gen %d, want > %d (%v)", g3, g2, err)
	}
	if rec, _ := s.GetSchedule(ctx, "nightly"); rec.Plan != nil || rec.PlanGen != 0 {
		t.Fatalf("a schedule created again kept the old plan: %+v", rec)
	}
	if list, _ := s.ListSchedules(ctx); len(list) != 2 {
		t.Fatalf("list after re-create: %d schedules, want 2", len(list))
	}
}
