package e2e

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/testkit"
)

// TestDevFirstCommand runs the README's first command, `bridge dev`, through the built
// binary, the way a newcomer would (with --exit so it ends after the demo): once with
// redis-server from PATH and once with the embedded Redis-compatible server. Each run
// must say which Redis it uses and where the console is, exit 0 without a data race, and
// print a summary in which every demo message arrived, none early, none twice.
func TestDevFirstCommand(t *testing.T) {
	for _, mode := range []struct {
		name string
		args []string
		want string // what the output says about Redis
	}{
		{"redis-server", nil, "redis (redis-server "},
		{"embedded", []string{"--embedded-redis"}, "redis (embedded miniredis"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			const count = 40
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			admin := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
			args := append([]string{"dev", "--count", strconv.Itoa(count), "--max-delay", "2s", "--exit",
				"--kafka-port", strconv.Itoa(testkit.FreePort(t)), "--admin", admin},
				mode.args...)
			cmd := exec.CommandContext(ctx, bridgeBin, args...)
			out, err := cmd.CombinedOutput()
			text := string(out)
			if err != nil {
				t.Fatalf("bridge dev: %v\n%s", err, text)
			}
			if strings.Contains(text, raceMarker) {
				t.Fatalf("bridge dev reported a data race:\n%s", text)
			}
			if !strings.Contains(text, mode.want) {
				t.Errorf("output does not say it uses %s:\n%s", mode.want, text)
			}
			if console := "console                 http://" + admin + "/ui/"; !strings.Contains(text, console) {
				t.Errorf("output does not name the console (want %q):\n%s", console, text)
			}
			m := regexp.MustCompile(`summary: (\d+) messages arrived, (\d+) early, (\d+) duplicates`).FindStringSubmatch(text)
			if m == nil {
				t.Fatalf("no summary line:\n%s", text)
			}
			if m[1] != strconv.Itoa(count) || m[2] != "0" || m[3] != "0" {
				t.Errorf("summary: %s arrived (want %d), %s early, %s duplicates\n%s", m[1], count, m[2], m[3], text)
			}
		})
	}
}
