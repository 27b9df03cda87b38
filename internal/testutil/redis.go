// Package testutil starts the real servers the tests run against: a redis-server child
// process on a free port, an in-process kfake Kafka broker, and a check for the RabbitMQ
// server on 127.0.0.1:5672. A missing server fails the test with a clear message; nothing
// is ever skipped silently.
package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testutil: no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Redis is a redis-server child process owned by one test.
type Redis struct {
	t    testing.TB
	Port int
	Dir  string
	args []string
	cmd  *exec.Cmd
	// password is the server's requirepass, used by the readiness check.
	password string
}

// Addr is host:port of the server.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// StartRedis starts redis-server on a free port with append-only persistence (so a
// restart keeps the data, as a production Redis with AOF would) and stops it when the
// test ends. extra arguments are appended to the command line.
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testutil: redis-server not found on PATH (install the Debian package redis-server): %v", err)
	}
	r := &Redis{t: t, Port: FreePort(t), Dir: t.TempDir()}
	r.args = append([]string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(r.Port),
		"--dir", r.Dir, "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
		"--daemonize", "no", "--logfile", filepath.Join(r.Dir, "redis.log"),
	}, extra...)
	r.start(bin)
	t.Cleanup(r.Stop)
	return r
}

func (r *Redis) start(bin string) {
	r.t.Helper()
	r.cmd = exec.Command(bin, r.args...)
	r.cmd.Stdout, r.cmd.Stderr = os.Stderr, os.Stderr
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("testutil: start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, Password: r.password})
		err := c.Ping(context.Background()).Err()
		c.Close()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(r.Dir, "redis.log"))
			r.t.Fatalf("testutil: redis-server on %s not ready: %v\n%s", r.Addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL (no chance to flush beyond what AOF already has).
func (r *Redis) Kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	r.cmd = nil
}

// Stop is Kill; kept for readability at call sites that are not fault tests.
func (r *Redis) Stop() { r.Kill() }

// Restart starts the server again on the same port and data directory.
func (r *Redis) Restart() {
	r.t.Helper()
	r.Kill()
	bin, _ := exec.LookPath("redis-server")
	r.start(bin)
}

// Client returns a go-redis client for the server, closed when the test ends.
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	r.t.Cleanup(func() { c.Close() })
	return c
}

// Uniq returns a name unique to this test run, for queues, exchanges, topics and prefixes.
func Uniq(t testing.TB, base string) string {
	return fmt.Sprintf("%s-%d-%d", base, os.Getpid(), time.Now().UnixNano()%1e9)
}
