// Package testkit starts the real servers the tests run against: a redis-server child
// process on a free port, an in-process kfake Kafka broker, and a check for the RabbitMQ
// server on 127.0.0.1:5672. A missing server fails the test with a clear message; nothing
// is ever skipped silently. Every redis-server child (plain, Cluster node, Sentinel data
// server or sentinel) is watched: one that exits without the test asking through a
// helper fails the test.
package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// Redis is a redis-server child process owned by one test. A watcher goroutine waits
// for every incarnation of the process: an exit the test did not ask for (through Kill,
// Stop, Restart, Shutdown, or the Sentinel and Cluster helpers built on them) fails the
// test with the process, its exit status and the tail of its log, at the moment it
// happens. A test that stops a server any other way must do it through one of these
// helpers.
type Redis struct {
	t    testing.TB
	Port int
	Dir  string
	args []string
	// password is the server's requirepass, used by the readiness check.
	password string

	mu sync.Mutex
	// proc is the current incarnation, nil before the first start and after Kill.
	proc *redisProc
}

// redisProc is one incarnation of the server process. Its fields other than cmd and
// done are guarded by Redis.mu.
type redisProc struct {
	cmd *exec.Cmd
	// done is closed by the watcher once the process has exited and the exit is judged.
	done chan struct{}
	// expect, when set, accepts the exit the test is causing (SIGKILL for Kill, status
	// 0 for Shutdown); any other exit is unexpected.
	expect func(*os.ProcessState) bool
	// starting is true while start's readiness check runs: start reports an exit then.
	starting bool
	// exit describes the exit status once the process has exited ("" before).
	exit string
}

// Addr is host:port of the server.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// PID is the process id of the running server, 0 when none runs.
func (r *Redis) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.cmd.Process.Pid
}

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
	t.Cleanup(r.Stop)
	r.start(bin)
	return r
}

// start launches a new incarnation with its watcher and waits until it answers PING.
// An exit before that fails the test at once (Fatalf), with the log.
func (r *Redis) start(bin string) {
	r.t.Helper()
	cmd := exec.Command(bin, r.args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("testutil: start redis-server: %v", err)
	}
	p := &redisProc{cmd: cmd, done: make(chan struct{}), starting: true}
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	go r.watch(p)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, Password: r.password})
		err := c.Ping(context.Background()).Err()
		c.Close()
		r.mu.Lock()
		exit := p.exit
		if err == nil || exit != "" {
			p.starting = false
		}
		r.mu.Unlock()
		if exit != "" {
			r.t.Fatalf("testutil: %s exited while starting: %s\n%s", r.describe(p), exit, r.logTail())
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("testutil: %s not ready: %v\n%s", r.describe(p), err, r.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watch waits for p to exit and fails the test unless the exit was asked for (or start
// reports it).
func (r *Redis) watch(p *redisProc) {
	defer close(p.done)
	err := p.cmd.Wait()
	r.mu.Lock()
	p.exit = exitStatus(err, p.cmd.ProcessState)
	unexpected := !p.starting && (p.expect == nil || !p.expect(p.cmd.ProcessState))
	r.mu.Unlock()
	if unexpected {
		r.t.Errorf("testutil: %s exited without the test asking: %s\n%s", r.describe(p), p.exit, r.logTail())
	}
}

func exitStatus(err error, st *os.ProcessState) string {
	if st == nil {
		return "wait: " + err.Error()
	}
	return st.String() // "exit status 1", "signal: killed", ...
}

// describe names the process in failure messages.
func (r *Redis) describe(p *redisProc) string {
	kind := "redis-server"
	if slices.Contains(r.args, "--sentinel") {
		kind = "redis-server --sentinel"
	}
	return fmt.Sprintf("%s on %s (pid %d)", kind, r.Addr(), p.cmd.Process.Pid)
}

// logTail returns the last lines of the server's log file.
func (r *Redis) logTail() string {
	path := filepath.Join(r.Dir, "redis.log")
	log, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("--- %s: %v", path, err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return fmt.Sprintf("--- %s (tail)\n%s", path, strings.Join(lines, "\n"))
}

// stopWith marks the running incarnation's exit as expected when accept says so, runs
// stop (which makes it exit) and waits until the watcher has judged the exit.
func (r *Redis) stopWith(accept func(*os.ProcessState) bool, stop func(*redisProc) error) error {
	r.mu.Lock()
	p := r.proc
	r.proc = nil
	if p != nil {
		p.expect = accept
	}
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	err := stop(p)
	<-p.done
	return err
}

func killedBySIGKILL(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Kill stops the server with SIGKILL (no chance to flush beyond what AOF already has)
// and waits for it to exit. It does nothing when no server runs.
func (r *Redis) Kill() {
	_ = r.stopWith(killedBySIGKILL, func(p *redisProc) error { return p.cmd.Process.Kill() })
}

// Stop is Kill; kept for readability at call sites that are not fault tests.
func (r *Redis) Stop() { r.Kill() }

// Shutdown stops the server the way an operator does, with SHUTDOWN NOSAVE (the
// append-only file is flushed), and waits for it to exit with status 0; any other
// exit status fails the test.
func (r *Redis) Shutdown() {
	r.t.Helper()
	clean := func(st *os.ProcessState) bool { return st.Success() }
	err := r.stopWith(clean, func(p *redisProc) error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, Password: r.password})
		defer c.Close()
		// The server closes the connection instead of answering: an error is expected.
		_ = c.ShutdownNoSave(context.Background()).Err()
		select {
		case <-p.done:
			return nil
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			return fmt.Errorf("testutil: %s did not exit within 30s of SHUTDOWN NOSAVE", r.describe(p))
		}
	})
	if err != nil {
		r.t.Errorf("%v", err)
	}
}

// Restart starts the server again on the same port and data directory (killing it
// first with SIGKILL if it runs).
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
