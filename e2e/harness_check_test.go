package e2e

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestHarnessDetectsRacesAndUnexpectedExits runs small shell programs through the same
// launch/kill/stop/problems path the bridges use: an unexpected exit status and a data
// race report are problems; a SIGKILL the test sent and a clean exit after SIGTERM are
// not.
func TestHarnessDetectsRacesAndUnexpectedExits(t *testing.T) {
	run := func(script string) *bridgeProc {
		p := &bridgeProc{t: t, log: &bytes.Buffer{}, argv: []string{"sh", "-c", script}}
		p.launch()
		return p
	}

	crashed := run("echo starting; exit 3")
	<-crashed.done
	if got := crashed.problems(); len(got) != 1 || !strings.Contains(got[0], "exit status 3") {
		t.Errorf("exit 3 unnoticed: problems %q", got)
	}

	racy := run("echo '==================\n" + raceMarker + "\nRead at 0x00c000012345 by goroutine 7:'; exec sleep 30")
	waitUntil(t, "the race report in the output", 10*time.Second, func() bool { return strings.Contains(racy.logs(), raceMarker) })
	racy.kill() // expected: only the race is a problem
	if got := racy.problems(); len(got) != 1 || !strings.Contains(got[0], "1 data race") {
		t.Errorf("race report unnoticed or the test's own SIGKILL counted: problems %q", got)
	}

	killed := run("exec sleep 30")
	killed.kill()
	if got := killed.problems(); len(got) != 0 {
		t.Errorf("a SIGKILL the test sent counted as a problem: %q", got)
	}

	// A process killed by someone else (not the test) is a problem.
	other := run("kill -9 $$")
	<-other.done
	if got := other.problems(); len(got) != 1 || !strings.Contains(got[0], "killed") {
		t.Errorf("a SIGKILL from elsewhere unnoticed: problems %q", got)
	}

	trapping := func(status string) *bridgeProc {
		p := run("trap 'exit " + status + "' TERM; echo trapped; while :; do sleep 0.05; done")
		waitUntil(t, "the TERM trap set", 10*time.Second, func() bool { return strings.Contains(p.logs(), "trapped") })
		return p
	}
	graceful := trapping("0")
	graceful.stop()
	if got := graceful.problems(); len(got) != 0 {
		t.Errorf("a clean exit after SIGTERM counted as a problem: %q", got)
	}

	failing := trapping("2")
	failing.stop()
	if got := failing.problems(); len(got) != 1 || !strings.Contains(got[0], "exit status 2") {
		t.Errorf("a failure status after SIGTERM unnoticed: problems %q", got)
	}
}
