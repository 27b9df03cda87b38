package testkit

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// StartKafka runs an in-process kfake cluster (a real Kafka wire-protocol broker) on a
// free port and returns its bootstrap address. Topics are auto-created on first use;
// topics lists ones to create up front with the given partition count.
func StartKafka(t testing.TB, partitions int, topics ...string) (addr string, c *kfake.Cluster) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(FreePort(t)), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(partitions)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testutil: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0], c
}

// StartKafkaProcess is StartKafka with the cluster in a process of its own
// (testkit/cmd/kfake, built without -race whatever the test binary is): for a test whose
// verdict depends on how fast the broker moves bytes, such as a burst of hundreds of
// MiB, which race instrumentation slows several times. The process ends with the test.
func StartKafkaProcess(t testing.TB, partitions int, topics ...string) (addr string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kfake")
	build := exec.Command("go", "build", "-o", bin, "github.com/delaybridge/delay-bridge/testkit/cmd/kfake")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("testutil: build kfake: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-port", strconv.Itoa(FreePort(t)), "-partitions", strconv.Itoa(partitions), "-topics", strings.Join(topics, ","))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("testutil: kfake: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("testutil: kfake: %v", err)
	}
	var stderr Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("testutil: start kfake: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close() // kfake stops when its input closes
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		s.Scan()
		line <- s.Text()
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr = <-line:
	case <-time.After(30 * time.Second):
	}
	if addr == "" {
		t.Fatalf("testutil: kfake did not start: %s", stderr.String())
	}
	return addr
}
