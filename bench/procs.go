package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitTCP waits until addr accepts connections.
func waitTCP(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not accepting connections after %s: %w", addr, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// child is a process the bench started; it is killed at the end of the run.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startChild(name, dir string, env []string, bin string, args ...string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to limit, then kills.
func (c *child) stop(limit time.Duration) {
	if c == nil || c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(limit):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func (c *child) kill() {
	if c == nil || c.exited() {
		return
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}

// tail returns the last n bytes of the child's log.
func (c *child) tail(n int) string {
	b, _ := os.ReadFile(c.log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// cpuSeconds is user+system CPU time consumed so far by pid (from /proc/PID/stat).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// rssBytes is VmRSS of pid (from /proc/PID/status).
func rssBytes(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// cpuMeter measures the CPU seconds several processes spend over an interval.
type cpuMeter struct {
	pids  map[string]int
	start map[string]float64
	t0    time.Time
}

func newCPUMeter(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: map[string]float64{}, t0: time.Now()}
	for name, pid := range pids {
		m.start[name] = cpuSeconds(pid)
	}
	return m
}

// CPUUse is CPU seconds per process over an interval, and the wall time.
type CPUUse struct {
	WallSeconds float64            `json:"wall_seconds"`
	CPUSeconds  map[string]float64 `json:"cpu_seconds"`
}

func (m *cpuMeter) done() CPUUse {
	u := CPUUse{WallSeconds: time.Since(m.t0).Seconds(), CPUSeconds: map[string]float64{}}
	for name, pid := range m.pids {
		u.CPUSeconds[name] = cpuSeconds(pid) - m.start[name]
	}
	return u
}

// String renders "bridge 1.2 cores, redis 0.4 cores, ...".
func (u CPUUse) String() string {
	var parts []string
	for _, name := range []string{"bridge", "passthrough", "redis", "kafka", "bench"} {
		if v, ok := u.CPUSeconds[name]; ok && u.WallSeconds > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, v/u.WallSeconds))
		}
	}
	return strings.Join(parts, ", ")
}

// machineInfo describes the machine for the report.
type machineInfo struct {
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpu_model"`
	MemTotal  int64   `json:"mem_total_bytes"`
	GoVersion string  `json:"go_version"`
	Load1     float64 `json:"loadavg_1m_at_start"`
	Kernel    string  `json:"kernel"`
	Redis     string  `json:"redis_version"`
}

func readMachine() machineInfo {
	var mi machineInfo
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok && mi.CPUModel == "" {
				mi.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			}
			if strings.HasPrefix(line, "processor") {
				mi.CPUs++
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				mi.MemTotal = kb * 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		mi.Load1, _ = strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		mi.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		mi.Redis = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		mi.GoVersion = strings.TrimSpace(string(out))
	}
	return mi
}

// loadavg1 is the 1-minute load average now.
func loadavg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(bytes.Fields(b)[0]), 64)
	return v
}

// sleepCtx sleeps d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
