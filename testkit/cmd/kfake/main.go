// Command kfake runs a kfake cluster (franz-go's Kafka wire-protocol broker) in a
// process of its own, for a test whose verdict depends on how fast the broker moves
// bytes: inside a race-built test process kfake is race-instrumented too
// (testkit.StartKafkaProcess builds and starts it).
//
//	kfake -port 9092 -partitions 4 -topics a,b
//
// It prints its listen address on one line once it accepts connections, and stops when
// its standard input closes (the test process ended, however it ended).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 0, "the port to listen on")
	partitions := flag.Int("partitions", 1, "partitions of every topic, those of -topics and those created on first use")
	topics := flag.String("topics", "", "comma-separated topics to create at start")
	flag.Parse()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(*partitions)}
	if *topics != "" {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), strings.Split(*topics, ",")...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
	fmt.Println(c.ListenAddrs()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	c.Close()
}
