package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/testkit"
)

// TestCtlSchedules drives `bridge ctl schedules …` against a running bridge (serve,
// real redis-server, kfake) with a config-file schedule: create, list, get (next 5
// slots), edit, pause, resume, delete, and the config schedule refused (409).
func TestCtlSchedules(t *testing.T) {
	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "orders.delay", "orders")
	srv := startServe(t, "redis.addrs="+rds.Addr(), "kafka.brokers="+kaddr, "shards=4",
		"prefix="+testkit.Uniq(t, "ctlsched"),
		"routes.0.name=orders", "routes.0.from.kafka.topic=orders.delay", "routes.0.to.kafka.topic=orders",
		"schedules.0.id=nightly", "schedules.0.route=orders", "schedules.0.spec=CRON_TZ=Europe/Berlin 0 2 * * *")
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return call(t, append([]string{"ctl", "--addr", srv.base, "--timeout", "5s"}, args...)...)
	}
	info := func(out string) admin.ScheduleInfo {
		t.Helper()
		var s admin.ScheduleInfo
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("not a schedule: %v\n%s", err, out)
		}
		return s
	}
	deadline := time.Now().Add(30 * time.Second)
	for code, _, _ := ctl("ready"); code != exitOK; code, _, _ = ctl("ready") {
		if time.Now().After(deadline) {
			t.Fatal("bridge not ready after 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	code, out, errOut := ctl("schedules", "create", "hourly", "--route", "orders", "--spec", "0 * * * *",
		"--payload", "tick", "--header", "a=b", "--jitter", "30s", "--catch-up", "one", "-o", "json")
	if s := info(out); code != exitOK || s.ID != "hourly" || s.Headers["a"] != "b" || s.JitterMs != 30000 || s.CatchUp != "one" {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := ctl("schedules", "create", "bad", "--route", "orders", "--spec", "61 * * * *"); code != exitError || !strings.Contains(errOut, "spec") {
		t.Errorf("create with a bad spec: %d %q", code, errOut)
	}
	if code, _, errOut := ctl("schedules", "create", "x", "--spec", "@every 1m"); code != exitUsage {
		t.Errorf("create without --route: %d %q", code, errOut)
	}
	var list []admin.ScheduleInfo
	waitList := time.Now().Add(10 * time.Second)
	for len(list) < 2 && time.Now().Before(waitList) {
		_, out, _ := ctl("schedules", "list", "-o", "json")
		var l admin.ScheduleList
		_ = json.Unmarshal([]byte(out), &l)
		list = l.Schedules
		time.Sleep(50 * time.Millisecond)
	}
	if len(list) != 2 || list[0].ID != "hourly" || list[1].ID != "nightly" || list[1].Origin != "config" {
		t.Fatalf("list: %+v", list)
	}
	code, out, _ = ctl("schedules", "get", "nightly", "-o", "json")
	if s := info(out); code != exitOK || len(s.Next) != 5 || s.Next[0].Slot%1000 != 0 {
		t.Fatalf("get: %d %s", code, out)
	}
	if code, out, _ := ctl("schedules", "get", "nightly"); code != exitOK || !strings.Contains(out, "NEXT:") || !strings.Contains(out, "config") {
		t.Errorf("get as a table: %d\n%s", code, out)
	}
	if code, _, errOut := ctl("schedules", "edit", "nightly", "--route", "orders", "--spec", "0 3 * * *"); code != exitError || !strings.Contains(errOut, "409") {
		t.Errorf("edit of a config schedule: %d %q", code, errOut)
	}
	code, out, _ = ctl("schedules", "edit", "hourly", "--route", "orders", "--spec", "30 * * * *", "-o", "json")
	if s := info(out); code != exitOK || s.Spec != "30 * * * *" || s.Generation != 2 || time.UnixMilli(s.Next[0].Slot).Minute() != 30 {
		t.Fatalf("edit: %d %s", code, out)
	}
	if code, out, _ := ctl("schedules", "pause", "hourly", "-o", "json"); code != exitOK || info(out).State != admin.SchedulePaused || len(info(out).Next) != 0 {
		t.Errorf("pause: %d %s", code, out)
	}
	if code, out, _ := ctl("schedules", "resume", "hourly", "-o", "json"); code != exitOK || info(out).State != admin.ScheduleActive {
		t.Errorf("resume: %d %s", code, out)
	}
	if code, out, _ := ctl("schedules", "delete", "hourly"); code != exitOK || !strings.Contains(out, "deleted") {
		t.Errorf("delete: %d %s", code, out)
	}
	if code, _, errOut := ctl("schedules", "get", "hourly"); code != exitError || !strings.Contains(errOut, "404") {
		t.Errorf("get after delete: %d %q", code, errOut)
	}
}
