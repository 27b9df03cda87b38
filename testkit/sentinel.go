package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSentinel is a Redis Sentinel set owned by one test: two data servers (one
// primary, one replica) and three sentinels monitoring them under MasterName, every
// process a redis-server child on a free port of 127.0.0.1, all killed when the test
// ends. Any of them exiting on its own fails the test (see Redis); KillPrimary and
// Restart are the ways a test stops and starts one.
type RedisSentinel struct {
	t          testing.TB
	MasterName string
	// Data are the data servers: Data[0] started as the primary, Data[1] as its
	// replica. Which one is the primary now is Primary()'s answer.
	Data []*Redis
	// Sentinels are the three `redis-server <conf> --sentinel` processes.
	Sentinels []*Redis
	// Password, when set, is the sentinels' requirepass (and what they use with each
	// other): redis.sentinel_password. The data servers have none.
	Password string
}

// Sentinel timing: a primary that does not answer for downAfter is subjectively down;
// failoverTimeout bounds each failover step (and a failed election is retried after
// twice that).
const (
	sentinelDownAfter       = 1000 * time.Millisecond
	sentinelFailoverTimeout = 5000 * time.Millisecond
	sentinelQuorum          = 2
)

// StartRedisSentinel starts a primary redis-server, a replica of it (`--replicaof`) and
// three sentinels, each with a writable configuration file of its own in a temporary
// directory (`sentinel monitor <name> 127.0.0.1 <primary port> 2`, down-after 1 s,
// failover-timeout 5 s), and waits until every sentinel names the primary, sees the
// replica with its link up and knows the other two sentinels — the state in which
// both a forced failover (Failover) and an election after a crash (KillPrimary) can
// proceed. Data servers use StartRedis's settings (append-only file); redis-server
// must be on PATH, or the test fails saying so.
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	return startRedisSentinel(t, 1, "")
}

// StartRedisSentinelAuth is StartRedisSentinel with sentinels that require password.
func StartRedisSentinelAuth(t testing.TB, password string) *RedisSentinel {
	t.Helper()
	return startRedisSentinel(t, 1, password)
}

// StartRedisSentinelReplicas is StartRedisSentinel with replicas replicas of the
// primary (Data[1:]).
func StartRedisSentinelReplicas(t testing.TB, replicas int) *RedisSentinel {
	t.Helper()
	return startRedisSentinel(t, replicas, "")
}

func startRedisSentinel(t testing.TB, replicas int, password string) *RedisSentinel {
	t.Helper()
	if replicas < 1 {
		t.Fatalf("testutil: a Sentinel set needs at least one replica to fail over to, asked for %d", replicas)
	}
	s := &RedisSentinel{t: t, MasterName: Uniq(t, "primary"), Password: password}
	// A zero delay so a replica's full sync (the first one, and the old primary's
	// after a failover) starts at once instead of after 5 s.
	primary := StartRedis(t, "--repl-diskless-sync-delay", "0")
	s.Data = []*Redis{primary}
	for i := 0; i < replicas; i++ {
		s.Data = append(s.Data, StartRedis(t, "--repl-diskless-sync-delay", "0", "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)))
	}
	// Sentinels discover replicas from the primary's INFO, every 10 s once they are
	// running: start them after the replica is attached so the first INFO shows it.
	s.waitReplicaLinked(primary, 30*time.Second)

	bin, err := exec.LookPath("redis-server") // StartRedis found it above
	if err != nil {
		t.Fatalf("testutil: redis-server not found on PATH: %v", err)
	}
	for i := 0; i < 3; i++ {
		s.Sentinels = append(s.Sentinels, s.startSentinel(bin, primary))
	}
	s.WaitReplicated(30 * time.Second)
	return s
}

func (s *RedisSentinel) startSentinel(bin string, primary *Redis) *Redis {
	s.t.Helper()
	r := &Redis{t: s.t, Port: FreePort(s.t), Dir: s.t.TempDir(), password: s.Password}
	conf := filepath.Join(r.Dir, "sentinel.conf")
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, r.Port, r.Dir, filepath.Join(r.Dir, "redis.log"),
		s.MasterName, primary.Port, sentinelQuorum,
		s.MasterName, sentinelDownAfter.Milliseconds(),
		s.MasterName, sentinelFailoverTimeout.Milliseconds(),
		s.MasterName)
	if s.Password != "" {
		text += fmt.Sprintf("requirepass %s\nsentinel sentinel-pass %s\n", s.Password, s.Password)
	}
	// Sentinel rewrites its file (discovered replicas and sentinels, failovers).
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		s.t.Fatalf("testutil: write %s: %v", conf, err)
	}
	r.args = []string{conf, "--sentinel"}
	s.t.Cleanup(r.Stop)
	r.start(bin)
	return r
}

// Addrs are the sentinels' host:port: redis.addrs for a Sentinel configuration.
func (s *RedisSentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, r := range s.Sentinels {
		out[i] = r.Addr()
	}
	return out
}

func (s *RedisSentinel) sentinelClient(r *Redis) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second, Password: s.Password,
		ReadTimeout: 2 * time.Second})
}

// primaryAddrs asks every sentinel which address it names as the primary ("" where a
// sentinel does not answer).
func (s *RedisSentinel) primaryAddrs(ctx context.Context) []string {
	out := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		c := s.sentinelClient(sn)
		a, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
		c.Close()
		if err == nil && len(a) == 2 {
			out[i] = net.JoinHostPort(a[0], a[1])
		}
	}
	return out
}

// byAddr returns the data server at addr, or nil.
func (s *RedisSentinel) byAddr(addr string) *Redis {
	for _, d := range s.Data {
		if d.Addr() == addr {
			return d
		}
	}
	return nil
}

// Primary returns the data server that the sentinels name as the primary now (the
// first answering sentinel's view).
func (s *RedisSentinel) Primary() *Redis {
	s.t.Helper()
	for _, a := range s.primaryAddrs(context.Background()) {
		if a == "" {
			continue
		}
		if d := s.byAddr(a); d != nil {
			return d
		}
		s.t.Fatalf("testutil: sentinel names %s as primary of %s, not one of this set's servers", a, s.MasterName)
	}
	s.t.Fatalf("testutil: no sentinel of %v answers for %s", s.Addrs(), s.MasterName)
	return nil
}

// Failover asks a sentinel for a forced failover (`SENTINEL FAILOVER <name>`: the
// replica is promoted without waiting for the primary to look down) and waits until
// every sentinel names the new primary and it reports role:master. It returns the old
// and the new primary. The old primary is made a replica of the new one by the
// sentinels some seconds later (Sentinel waits about 8 s before reconfiguring a server
// that still says it is a primary); WaitReplicaSynced waits for that.
func (s *RedisSentinel) Failover() (old, promoted *Redis) {
	s.t.Helper()
	old = s.Primary()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		c := s.sentinelClient(s.Sentinels[i%len(s.Sentinels)])
		err := c.Failover(ctx, s.MasterName).Err()
		c.Close()
		if err == nil {
			break
		}
		// INPROG (one is already running) and NOGOODSLAVE (the sentinel's view of the
		// replica is stale for a moment) pass; anything else is a broken setup.
		if !strings.HasPrefix(err.Error(), "INPROG") && !strings.HasPrefix(err.Error(), "NOGOODSLAVE") || time.Now().After(deadline) {
			s.t.Fatalf("testutil: SENTINEL FAILOVER %s: %v", s.MasterName, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return old, s.WaitNewPrimary(old, 30*time.Second)
}

// KillPrimary kills the current primary with SIGKILL (an unplanned failure: whatever
// it had not yet replicated is gone) and returns it. The sentinels elect a leader and
// promote the replica once the primary has been unreachable for down-after (1 s);
// WaitNewPrimary waits for that. The killed server's Restart brings it back (with its
// append-only file), and the sentinels then make it a replica of the new primary
// (WaitReplicaSynced).
func (s *RedisSentinel) KillPrimary() *Redis {
	s.t.Helper()
	p := s.Primary()
	p.Kill()
	return p
}

// WaitNewPrimary waits until every sentinel names one and the same primary other than
// old and that server reports role:master, and returns it.
func (s *RedisSentinel) WaitNewPrimary(old *Redis, limit time.Duration) *Redis {
	s.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	var last []string
	for {
		last = s.primaryAddrs(ctx)
		if agreed(last) && last[0] != old.Addr() {
			if p := s.byAddr(last[0]); p != nil && s.role(ctx, p) == "master" {
				return p
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("testutil: sentinels did not agree on a new primary for %s (old %s) within %s: they name %v\n%s",
				s.MasterName, old.Addr(), limit, last, s.logTails())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func agreed(addrs []string) bool {
	for _, a := range addrs {
		if a == "" || a != addrs[0] {
			return false
		}
	}
	return len(addrs) > 0
}

// replication returns the fields of r's INFO replication.
func replication(ctx context.Context, r *Redis) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	return infoFields(info), nil
}

func (s *RedisSentinel) role(ctx context.Context, r *Redis) string {
	f, err := replication(ctx, r)
	if err != nil {
		return ""
	}
	return f["role"]
}

// WaitReplicated waits until the current primary is the primary of every sentinel and
// of every other data server (each a replica with its link up, online on the primary),
// and every sentinel knows the other sentinels and sees every replica healthy. That is
// the steady state: after StartRedisSentinel, and after a failover once the old
// primary (restarted, if it was killed) has been turned into a replica and synced.
// With redis.min_replicas 1, parks succeed again from then on.
func (s *RedisSentinel) WaitReplicated(limit time.Duration) {
	s.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		why := s.replicated(ctx)
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("testutil: Sentinel set %s not in a steady state within %s: %s\n%s", s.MasterName, limit, why, s.logTails())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitReplicaSynced waits until the primary the sentinels agree on has every other
// data server as an online replica (link up, initial sync done), without waiting for
// the sentinels' own view of the replicas to catch up (they refresh it every 10 s).
// That is enough for writes with redis.min_replicas 1 to succeed again; WaitReplicated
// is the full steady state a further failover needs.
func (s *RedisSentinel) WaitReplicaSynced(limit time.Duration) {
	s.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		_, why := s.syncedPrimary(ctx)
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("testutil: Sentinel set %s: replicas not synced within %s: %s\n%s", s.MasterName, limit, why, s.logTails())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncedPrimary returns the primary the sentinels agree on if every other data server
// is its online replica, or what is missing.
func (s *RedisSentinel) syncedPrimary(ctx context.Context) (*Redis, string) {
	addrs := s.primaryAddrs(ctx)
	if !agreed(addrs) {
		return nil, fmt.Sprintf("sentinels name primaries %v", addrs)
	}
	primary := s.byAddr(addrs[0])
	if primary == nil {
		return nil, fmt.Sprintf("sentinels name %s, not one of this set's servers", addrs[0])
	}
	return primary, s.replicaLinked(ctx, primary)
}

// replicated returns "" in the steady state, or what is missing.
func (s *RedisSentinel) replicated(ctx context.Context) string {
	primary, why := s.syncedPrimary(ctx)
	if why != "" {
		return why
	}
	for _, sn := range s.Sentinels {
		c := s.sentinelClient(sn)
		m, err := c.Master(ctx, s.MasterName).Result()
		if err != nil {
			c.Close()
			return fmt.Sprintf("sentinel %s: SENTINEL MASTER: %v", sn.Addr(), err)
		}
		if m["flags"] != "master" || m["num-other-sentinels"] != strconv.Itoa(len(s.Sentinels)-1) {
			c.Close()
			return fmt.Sprintf("sentinel %s: primary flags %q, other sentinels %s", sn.Addr(), m["flags"], m["num-other-sentinels"])
		}
		reps, err := c.Replicas(ctx, s.MasterName).Result()
		c.Close()
		if err != nil {
			return fmt.Sprintf("sentinel %s: SENTINEL REPLICAS: %v", sn.Addr(), err)
		}
		for _, d := range s.Data {
			if d == primary {
				continue
			}
			ok := false
			for _, rep := range reps {
				if net.JoinHostPort(rep["ip"], rep["port"]) == d.Addr() && rep["flags"] == "slave" &&
					rep["master-link-status"] == "ok" && rep["master-port"] == strconv.Itoa(primary.Port) {
					ok = true
				}
			}
			if !ok {
				return fmt.Sprintf("sentinel %s does not see %s as a healthy replica of %s yet: %v", sn.Addr(), d.Addr(), primary.Addr(), reps)
			}
		}
	}
	return ""
}

// waitReplicaLinked waits until primary has every other data server as an online
// replica whose own link reports up.
func (s *RedisSentinel) waitReplicaLinked(primary *Redis, limit time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		why := s.replicaLinked(context.Background(), primary)
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("testutil: replication to %s not up within %s: %s", primary.Addr(), limit, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *RedisSentinel) replicaLinked(ctx context.Context, primary *Redis) string {
	f, err := replication(ctx, primary)
	if err != nil {
		return fmt.Sprintf("primary %s: %v", primary.Addr(), err)
	}
	if f["role"] != "master" {
		return fmt.Sprintf("%s has role %q", primary.Addr(), f["role"])
	}
	for _, d := range s.Data {
		if d == primary {
			continue
		}
		online := false
		for k, v := range f {
			if strings.HasPrefix(k, "slave") && strings.Contains(v, "port="+strconv.Itoa(d.Port)+",") &&
				strings.Contains(v, "state=online") {
				online = true
			}
		}
		if !online {
			return fmt.Sprintf("%s is not an online replica of %s", d.Addr(), primary.Addr())
		}
		rf, err := replication(ctx, d)
		if err != nil {
			return fmt.Sprintf("replica %s: %v", d.Addr(), err)
		}
		if rf["master_port"] != strconv.Itoa(primary.Port) || rf["master_link_status"] != "up" {
			return fmt.Sprintf("replica %s: master_port %s, link %s", d.Addr(), rf["master_port"], rf["master_link_status"])
		}
	}
	return ""
}

// logTails returns the end of every sentinel's log, for failure messages.
func (s *RedisSentinel) logTails() string {
	var b strings.Builder
	for _, sn := range s.Sentinels {
		log, _ := os.ReadFile(filepath.Join(sn.Dir, "redis.log"))
		lines := strings.Split(strings.TrimSpace(string(log)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- sentinel %s log (tail)\n%s\n", sn.Addr(), strings.Join(lines, "\n"))
	}
	return b.String()
}

// Client returns a go-redis Sentinel (failover) client for the set, closed when the
// test ends.
func (s *RedisSentinel) Client() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs(), SentinelPassword: s.Password})
	s.t.Cleanup(func() { c.Close() })
	return c
}
