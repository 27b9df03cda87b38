// Command instr counts the CPU instructions redis-server executes per message for the
// store's park, claim and ack, with valgrind's callgrind: a count, not a time, so it
// repeats within about 2 % (redis-server's timers and the client's timing move it a
// little) whatever else the machine is doing, where shared 2-core hosts move timings by
// 2-3x.
//
//	cd bench && go run ./instr                       # calls of 30 Kafka default ids
//	cd bench && go run ./instr -batch 10 -ids short  # calls of 10 user-given ids
//	cd bench && go run ./instr -top 25               # and the top functions of the full run
//	cd bench && go run ./instr -spread 32            # each fetch due over 32 claims
//	cd bench && go run ./instr -payload 4096         # messages of 4 KiB
//	cd bench && go run ./instr -claim-at-park        # the park claims what is due soon
//	cd bench && go run ./instr -layout buckets       # the time-bucket probe (buckets.go)
//	cd bench && go run ./instr -layout buckets -ack bitmap  # its acks as bucket bitmaps
//	cd bench && go run ./instr -layout buckets -bucket hash # buckets as hashes of id -> envelope
//	cd bench && go run ./instr -layout buckets -bucket listpos # slots that hold positions
//	cd bench && go run ./instr -time [-layout …]     # redis-server's CPU time instead (timed.go)
//
// Each stage runs on a fresh redis-server under callgrind (no persistence), prefilled
// so that the shard's sorted sets have a live shard's encoding (2,000 messages due in
// two minutes, under the cold tier's horizon, and 600 in flight: skiplists, not
// listpacks; -prefill-cold parks the 2,000 an hour ahead instead, into the cold tier,
// whose index entries Kafka default ids are then also looked up in), then -rounds rounds of -batch
// messages on one shard: park only; park and claim; park, claim and ack. The
// differences between the stages' totals, divided by the messages, are each script's
// instructions per message, the fixed cost of its calls included (startup, library
// load and prefill cancel out against the prefill-only stage).
//
// With -spread N each parked batch is due over the next N rounds (100 ms apart) and
// each round claims what is due by then, as at a steady rate with scattered delays: a
// claim and an ack then hold offsets of many fetches, far apart in their blocks. The
// rounds go on without parks until everything parked was acknowledged.
//
// It needs valgrind (callgrind) and redis-server on PATH (-redis-server picks
// another build: one built from source with symbols names Lua's and Redis's functions
// in -top instead of addresses).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// t0 is the due time of the measured messages: now, as the store's clock (the real
// one) sees it, so that the prefill's due times are really ahead of it.
var t0 = time.Now().UnixMilli()

type options struct {
	batch, rounds int
	kafkaIDs      bool
	server        string
	top           int
	prefillCold   bool
	keep          string
	spread        int
	claimAtPark   bool
	layout        string
	bucketMS      int
	ack           string
	bucket        string
	time          bool
	buckets       bool
}

// payloadBytes is every message's payload size (-payload).
var payloadBytes = 100

// stages are cumulative: each runs what the one before ran and one more script.
var stages = []string{"prefill", "park", "claim", "ack"}

func main() {
	var o options
	ids := flag.String("ids", "kafka", "kafka: ids of the Kafka default form (topic/partition/offset/hash); short: user-given ids")
	flag.IntVar(&o.batch, "batch", 30, "messages per call")
	flag.IntVar(&o.rounds, "rounds", 300, "park/claim/ack rounds")
	flag.StringVar(&o.server, "redis-server", "redis-server", "the redis-server binary")
	flag.BoolVar(&o.prefillCold, "prefill-cold", false, "park the prefill an hour ahead (the cold tier) instead of two minutes")
	flag.IntVar(&o.top, "top", 0, "print the N functions with the most instructions of the full run (callgrind_annotate)")
	flag.IntVar(&o.spread, "spread", 1, "due times of a parked batch spread over this many rounds (1: all due at once, claimed in the same round)")
	flag.IntVar(&payloadBytes, "payload", 100, "payload bytes of every message")
	flag.BoolVar(&o.claimAtPark, "claim-at-park", false, "park as the bridge does: messages due within the lookahead (2 s: 20 rounds) are claimed by the park (ParkClaimEach), not by a claim")
	flag.StringVar(&o.layout, "layout", "store", "store: the store's scripts; buckets: the time-bucket probe (buckets.go)")
	flag.IntVar(&o.bucketMS, "bucket-ms", 1024, "-layout buckets: a bucket's width (ms)")
	flag.StringVar(&o.bucket, "bucket", "list", "-layout buckets: list: a bucket is a LIST of elements; listpos: the same, each id's slot holding its element's position; hash: a HASH of id -> envelope")
	flag.StringVar(&o.ack, "ack", "slots", "-layout buckets: slots: ack marks each id's slot delivered; bitmap: per in-flight bucket, a bitmap of acknowledged positions; none (-bucket hash): ack only takes the ids out of their buckets")
	flag.BoolVar(&o.buckets, "buckets", false, "-layout store: the store with due buckets on (redisstore.Options.Buckets), its clock at round i's start (t0 + 100 ms · i)")
	flag.BoolVar(&o.time, "time", false, "instead of counting, run park, claim and ack once on a plain redis-server and report its CPU time and commandstats' time per message")
	flag.StringVar(&o.keep, "keep", "", "write each stage's callgrind file into this directory and keep it (compare two stages with callgrind_annotate)")
	flag.Parse()
	o.kafkaIDs = *ids == "kafka"
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "instr:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.time {
		return timed(o)
	}
	if _, err := exec.LookPath("valgrind"); err != nil {
		return fmt.Errorf("valgrind not found (apt-get install valgrind): %w", err)
	}
	dir := o.keep
	if dir == "" {
		tmp, err := os.MkdirTemp("", "instr-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var err error
	totals := make([]int64, len(stages))
	for i := range stages {
		out := filepath.Join(dir, stages[i]+".callgrind")
		if totals[i], err = measure(o, i, out); err != nil {
			return fmt.Errorf("stage %s: %w", stages[i], err)
		}
		if o.top > 0 && i == len(stages)-1 {
			annotate(out, o.top)
		}
	}
	msgs := float64(o.batch * o.rounds)
	ids := map[bool]string{true: "kafka", false: "short"}[o.kafkaIDs]
	fmt.Printf("redis-server instructions per message, calls of %d, %s ids, %d rounds (cd bench && go run ./instr -batch %d -ids %s -spread %d -claim-at-park=%v -layout %s -bucket %s -bucket-ms %d -ack %s):\n\n",
		o.batch, ids, o.rounds, o.batch, ids, o.spread, o.claimAtPark, o.layout, o.bucket, o.bucketMS, o.ack)
	fmt.Println("| script | instructions per message |")
	fmt.Println("|---|---|")
	for i := 1; i < len(stages); i++ {
		fmt.Printf("| %s | %.0f |\n", stages[i], float64(totals[i]-totals[i-1])/msgs)
	}
	fmt.Printf("| park + claim + ack | %.0f |\n", float64(totals[len(stages)-1]-totals[0])/msgs)
	return nil
}

// measure runs stage upto (index into stages) on a fresh redis-server under callgrind
// and returns its instruction total.
func measure(o options, upto int, out string) (int64, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out, o.server,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for rdb.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			_ = cmd.Process.Kill()
			return 0, fmt.Errorf("redis-server under valgrind did not answer at %s", addr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	werr := workloadOf(ctx, rdb, o, upto)
	_ = rdb.Do(ctx, "SHUTDOWN", "NOSAVE").Err() // callgrind writes its totals on exit
	if err := cmd.Wait(); err != nil && werr == nil {
		werr = fmt.Errorf("redis-server: %w", err)
	}
	if werr != nil {
		return 0, werr
	}
	return totalOf(out)
}

// workload prefills one shard, then runs rounds of the stages up to upto.
func workload(ctx context.Context, rdb *redis.Client, o options, upto int) error {
	sim := &roundClock{}
	sim.at.Store(t0)
	s, err := redisstore.New(ctx, rdb, redisstore.Options{Shards: 1, DoneWindow: time.Hour, Buckets: o.buckets, Clock: sim})
	if err != nil {
		return err
	}
	tok, err := s.AcquireLease(ctx, 0, "instr", 1<<40)
	if err != nil {
		return err
	}
	ahead := int64(120_000)
	if o.prefillCold {
		ahead = 3_600_000
	}
	var pre []*envelope.Envelope
	for j := range 2000 {
		pre = append(pre, message(fmt.Sprintf("far-%d", j), t0+ahead))
	}
	for j := range 600 {
		pre = append(pre, message(fmt.Sprintf("held-%d", j), t0-1000))
	}
	for k := 0; k < len(pre); k += 200 {
		if _, _, err := s.Park(ctx, pre[k:k+200]); err != nil {
			return err
		}
	}
	if _, _, err := s.Claim(ctx, 0, "instr", tok, t0-1000, t0+30_000, 600); err != nil {
		return err
	}
	afterPrefill(ctx)
	var waiting []*envelope.Envelope // claimed by their parks, not due yet
	for i := 0; upto > 0 && i < o.rounds+o.spread-1; i++ {
		sim.at.Store(t0 + int64(i)*100)
		var held []*envelope.Envelope // claimed by the park
		if i < o.rounds {
			if held, err = parkRound(ctx, s, o, i, tok); err != nil {
				return err
			}
		}
		if upto < 2 {
			continue
		}
		var items []*envelope.Envelope
		if !o.claimAtPark || o.spread > 1 { // else everything was claimed by its park
			upTo := t0 + int64(i)*100 + 99 // round i's window (-spread: rounds are 100 ms apart)
			if o.spread <= 1 {
				upTo = t0
			}
			// As the pump asks: one that keeps up (-spread: each message claimed ahead
			// of its due time) does not tell the store its clock; one behind (without
			// -spread everything is due at once: a drain) does, and it is the due time.
			now := int64(0)
			if o.spread <= 1 {
				now = upTo
			}
			req := storeapi.ClaimRequest{Shard: 0, Instance: "instr", Token: tok, UpTo: upTo, LeaseDeadline: t0 + 30_000, Limit: 10 * o.batch, Now: now}
			out := s.ClaimMany(ctx, []storeapi.ClaimRequest{req})
			if items, err = out[0].Items, out[0].Err; err != nil {
				return err
			}
		}
		// One ack a round, of what its claim took and what parks claimed that is due
		// in its window, as the bridge's completer acknowledges whatever fired together.
		waiting = append(waiting, held...)
		due := t0 + int64(i)*100 + 99
		if o.spread <= 1 {
			due = t0
		}
		kept := waiting[:0]
		for _, e := range waiting {
			if e.DueAt <= due {
				items = append(items, e)
			} else {
				kept = append(kept, e)
			}
		}
		waiting = kept
		if upto < 3 || len(items) == 0 {
			continue
		}
		if err := s.AckEnvelopes(ctx, items, t0); err != nil {
			return err
		}
	}
	return nil
}

// parkRound parks round i's batch: consecutive offsets of one partition (a fetch), due
// at t0, or with -spread in one of the next o.spread rounds' windows (a fixed
// pseudo-random pick, the same in every stage). With -claim-at-park it claims those
// due within the lookahead and returns them.
func parkRound(ctx context.Context, s *redisstore.Store, o options, i int, tok int64) ([]*envelope.Envelope, error) {
	envs := make([]*envelope.Envelope, o.batch)
	want := make([]bool, o.batch)
	for j := range envs {
		id := fmt.Sprintf("c%d-%d", i, j)
		if o.kafkaIDs {
			id = fmt.Sprintf("orders.delay/3/%d/%012x", i*o.batch+j, i*o.batch+j)
		}
		due := t0
		if o.spread > 1 {
			k := int64((uint32(j)*2654435761 + uint32(i)*40503) % uint32(o.spread))
			due = t0 + (int64(i)+k)*100 + 50
		}
		envs[j] = message(id, due)
		want[j] = o.claimAtPark && (o.spread <= 1 || due <= t0+int64(i+lookaheadRounds)*100)
	}
	c := storeapi.ParkClaim{Instance: "instr", Want: want,
		Leases: map[int]storeapi.ParkLease{0: {Token: tok, LeaseDeadline: t0 + 30_001}}}
	_, claimed, _, err := s.ParkClaimEach(ctx, envs, c)
	var held []*envelope.Envelope
	for j, ok := range claimed {
		if ok {
			held = append(held, envs[j])
		}
	}
	return held, err
}

// lookaheadRounds is the bridge's default lookahead (2 s) in rounds of 100 ms.
const lookaheadRounds = 20

// message is a typical small Kafka message: a 100-byte payload (-payload), a key, two
// headers.
func message(id string, due int64) *envelope.Envelope {
	return &envelope.Envelope{
		ID: id, Route: "orders", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
		DueAt: due, ReceivedAt: due, Key: []byte("customer-42"), Payload: make([]byte, payloadBytes),
		Headers: []envelope.Header{{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, {Key: "x-delay", Value: "60000"}},
	}
}

// totalOf reads the instruction total callgrind wrote ("totals:" or "summary:").
func totalOf(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no totals line", path)
}

// annotate prints the n functions with the most instructions of a callgrind file.
func annotate(path string, n int) {
	out, err := exec.Command("callgrind_annotate", path).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "callgrind_annotate:", err)
		return
	}
	lines := strings.Split(string(out), "\n")
	shown := 0
	fmt.Println("Top functions of the park + claim + ack run (instructions, exclusive):")
	for _, l := range lines {
		if shown < n && strings.Contains(l, "(") && strings.Contains(l, "%)") && !strings.Contains(l, "PROGRAM TOTALS") {
			fmt.Println("   ", strings.TrimSpace(l))
			shown++
		}
	}
	fmt.Println()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// roundClock is the store's clock in the workload: round i's start, t0 + 100 ms · i, so
// that what park buckets (due two bucket widths ahead, -buckets) follows the rounds,
// not the time a round takes to run.
type roundClock struct {
	clock.Real
	at atomic.Int64
}

func (c *roundClock) Now() time.Time { return time.UnixMilli(c.at.Load()) }
