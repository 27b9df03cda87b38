package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const goodYAML = `
cluster: prod
shards: 128
redis:
  addrs: ["r1:6379", "r2:6379"]
  password: s3cret
scheduler:
  tick: 5ms
  claim_batch: 200
  lookahead: 1s
limits:
  max_delay: 720h
routes:
  - name: orders
    from: { kafka: { topic: orders.delay } }
    to:   { kafka: { topic: orders } }
  - name: billing
    from: { amqp: { queue: billing.delay, exchange: delayed } }
    to:   { amqp: { exchange: billing } }
    max_rate: 250.5
admin:
  token: tok
amqp:
  url: amqp://user:pa55@rabbit:5672/
`

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// load runs Load with an explicit (possibly empty) environment so the test process's
// own environment never leaks in.
func load(t *testing.T, file string, env []string, set ...string) (Config, error) {
	t.Helper()
	if env == nil {
		env = []string{}
	}
	return Load(LoadOptions{File: file, Env: env, Set: set})
}

// minimalRoute makes an otherwise default configuration valid.
var minimalRoute = []string{
	"routes.0.name=r", "routes.0.from.kafka.topic=in", "routes.0.to.kafka.topic=out",
}

func mustFieldError(t *testing.T, err error, key, source string, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error for %s, got nil", key)
	}
	for _, fe := range FieldErrors(err) {
		if fe.Key != key {
			continue
		}
		if source != "" && fe.Source != source {
			t.Errorf("%s: source = %q, want %q (error %q)", key, fe.Source, source, fe)
		}
		msg := fe.Error()
		for _, c := range contains {
			if !strings.Contains(msg, c) {
				t.Errorf("%s: error %q does not contain %q", key, msg, c)
			}
		}
		return
	}
	t.Fatalf("no error names key %q; got:\n%v", key, err)
}

func TestLoadDefaultsNeedARoute(t *testing.T) {
	_, err := load(t, "", nil)
	mustFieldError(t, err, "routes", "not set", "at least one route")

	cfg, err := load(t, "", nil, minimalRoute...)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Routes = []Route{{Name: "r", From: Endpoint{Kafka: &KafkaEndpoint{Topic: "in"}},
		To: Endpoint{Kafka: &KafkaEndpoint{Topic: "out"}}, OnInvalid: OnInvalidDeadLetter}}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
}

func TestLoadFile(t *testing.T) {
	cfg, err := load(t, writeFile(t, goodYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster != "prod" || cfg.Shards != 128 {
		t.Errorf("cluster/shards = %q/%d", cfg.Cluster, cfg.Shards)
	}
	if !reflect.DeepEqual(cfg.Redis.Addrs, []string{"r1:6379", "r2:6379"}) {
		t.Errorf("redis.addrs = %v", cfg.Redis.Addrs)
	}
	if cfg.Scheduler.Tick != 5*time.Millisecond || cfg.Scheduler.Lookahead != time.Second ||
		cfg.Scheduler.ClaimBatch != 200 || cfg.Limits.MaxDelay != 720*time.Hour {
		t.Errorf("scheduler/limits = %+v %+v", cfg.Scheduler, cfg.Limits)
	}
	// Keys the file does not mention keep their defaults.
	if cfg.Scheduler.InflightLease != 30*time.Second || cfg.Kafka.GroupID != "delay-bridge" {
		t.Errorf("defaults lost: %+v %+v", cfg.Scheduler, cfg.Kafka)
	}
	if len(cfg.Routes) != 2 || cfg.Routes[1].From.AMQP == nil || cfg.Routes[1].From.AMQP.Queue != "billing.delay" ||
		cfg.Routes[1].MaxRate != 250.5 || cfg.Routes[1].From.AMQP.ExchangeType != "topic" {
		t.Errorf("routes = %+v", cfg.Routes)
	}
}

func TestLoadPrecedence(t *testing.T) {
	file := writeFile(t, goodYAML)
	env := []string{
		"DELAYBRIDGE_SCHEDULER__CLAIM_BATCH=500", // overrides file 200
		"DELAYBRIDGE_SCHEDULER__TICK=3ms",        // overrides file 5ms, then the flag wins
		"DELAYBRIDGE_REDIS__ADDRS=a:1, b:2",
		"DELAYBRIDGE_LOG__LEVEL=debug",
		"DELAYBRIDGE_ROUTES__0__TO__KAFKA__TOPIC=orders.v2",
		"OTHER_VAR=1",
	}
	cfg, err := load(t, file, env, "scheduler.tick=2ms", "log.level=warn", "routes[1].max_rate=7")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scheduler.Tick != 2*time.Millisecond {
		t.Errorf("tick = %s, want flag's 2ms", cfg.Scheduler.Tick)
	}
	if cfg.Scheduler.ClaimBatch != 500 {
		t.Errorf("claim_batch = %d, want env's 500", cfg.Scheduler.ClaimBatch)
	}
	if cfg.Scheduler.Lookahead != time.Second {
		t.Errorf("lookahead = %s, want file's 1s", cfg.Scheduler.Lookahead)
	}
	if cfg.Scheduler.InflightLease != 30*time.Second {
		t.Errorf("inflight_lease = %s, want default", cfg.Scheduler.InflightLease)
	}
	if !reflect.DeepEqual(cfg.Redis.Addrs, []string{"a:1", "b:2"}) {
		t.Errorf("redis.addrs = %q, want env list", cfg.Redis.Addrs)
	}
	if cfg.Log.Level != "warn" {
		t.Errorf("log.level = %q", cfg.Log.Level)
	}
	if got := cfg.Routes[0]; got.To.Kafka.Topic != "orders.v2" || got.From.Kafka.Topic != "orders.delay" || got.Name != "orders" {
		t.Errorf("routes[0] = %+v / %+v: env must patch one key of the file's element", got.From.Kafka, got.To.Kafka)
	}
	if cfg.Routes[1].MaxRate != 7 || cfg.Routes[1].From.AMQP.Queue != "billing.delay" {
		t.Errorf("routes[1] = %+v", cfg.Routes[1])
	}
	// Environment names that Kubernetes injects for a Service called delaybridge, and
	// the test suite's own variables.
	env = append(env, "DELAYBRIDGE_SERVICE_HOST=10.0.0.1", "DELAYBRIDGE_PORT=tcp://10.0.0.1:8089",
		"DELAYBRIDGE_PORT_8089_TCP_ADDR=10.0.0.1", "DELAYBRIDGE_TEST_AMQP_URL=amqp://x")
	if _, err := load(t, file, env); err != nil {
		t.Errorf("k8s service links must be ignored: %v", err)
	}
}

func TestLoadRoutesFromEnvAndFlags(t *testing.T) {
	env := []string{}
	// Eleven routes by env only: the index order must be numeric (2 before 10).
	for _, i := range []string{"10", "2", "0", "1", "3", "4", "5", "6", "7", "8", "9"} {
		env = append(env,
			"DELAYBRIDGE_ROUTES__"+i+"__NAME=r"+i,
			"DELAYBRIDGE_ROUTES__"+i+"__FROM__KAFKA__TOPIC=in"+i,
			"DELAYBRIDGE_ROUTES__"+i+"__TO__AMQP__EXCHANGE=ex"+i)
	}
	cfg, err := load(t, "", env, "routes.11.name=last", "routes.11.from.amqp.queue=q", "routes.11.to.kafka.topic=t")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routes) != 12 || cfg.Routes[10].Name != "r10" || cfg.Routes[10].To.AMQP.Exchange != "ex10" ||
		cfg.Routes[11].From.AMQP.Queue != "q" {
		t.Fatalf("routes = %+v", cfg.Routes)
	}

	_, err = load(t, "", nil, "routes.1.name=x")
	mustFieldError(t, err, "routes[1]", "flag --set routes.1.name", "index out of range", "index 0 appends")
}

func TestLoadUnknownKeys(t *testing.T) {
	file := writeFile(t, `
redis:
  adrs: ["x:1"]
sheduler: {tick: 1ms}
routes:
  - name: a
    from: {kafka: {topic: a}}
    to: {kafka: {topik: b}}
`)
	_, err := load(t, file, nil)
	src := "file " + file
	mustFieldError(t, err, "redis.adrs", src, "unknown key", `did you mean "addrs"`)
	mustFieldError(t, err, "sheduler", src, `did you mean "scheduler"`)
	mustFieldError(t, err, "routes[0].to.kafka.topik", src, `did you mean "topic"`)

	_, err = load(t, "", []string{"DELAYBRIDGE_REDIS__ADDR=x:1"}, minimalRoute...)
	mustFieldError(t, err, "redis.addr", "env DELAYBRIDGE_REDIS__ADDR", "unknown key")

	_, err = load(t, "", nil, append(minimalRoute, "scheduler.ticks=1ms")...)
	mustFieldError(t, err, "scheduler.ticks", "flag --set scheduler.ticks", `did you mean "tick"`)

	// kafka.session_timeout is no key: partitions are owned by lease, not by a group.
	_, err = load(t, "", nil, append(minimalRoute, "kafka.session_timeout=10s")...)
	mustFieldError(t, err, "kafka.session_timeout", "flag --set kafka.session_timeout", "unknown key")

	_, err = load(t, "", nil, append(minimalRoute, "scheduler=1ms")...)
	mustFieldError(t, err, "scheduler", "flag --set scheduler", "is a section")

	_, err = load(t, "", nil, append(minimalRoute, "redis.addrs.0=x:1")...)
	mustFieldError(t, err, "redis.addrs.0", "flag --set redis.addrs.0", "single value")

	_, err = load(t, "", nil, "noequals")
	if err == nil || !strings.Contains(err.Error(), "flag --set noequals: want key=value") {
		t.Errorf("err = %v", err)
	}
}

func TestLoadBadValues(t *testing.T) {
	file := writeFile(t, `
scheduler:
  tick: 5            # no unit
  lookahead: soon
  claim_batch: many
limits: {max_delay: 0}
cluster: 12
routes: {name: x}
`)
	src := "file " + file
	_, err := load(t, file, nil)
	mustFieldError(t, err, "scheduler.tick", src, "Go duration", "no unit")
	mustFieldError(t, err, "scheduler.lookahead", src, `got "soon"`)
	mustFieldError(t, err, "scheduler.claim_batch", src, "want an integer")
	mustFieldError(t, err, "cluster", src, "want a string")
	mustFieldError(t, err, "routes", src, "want a list")
	for _, fe := range FieldErrors(err) {
		if fe.Key == "limits.max_delay" {
			t.Errorf("max_delay: 0 is a valid duration at load time, got %v", fe)
		}
	}

	_, err = load(t, "", []string{"DELAYBRIDGE_SCHEDULER__TICK=1 ms"}, minimalRoute...)
	mustFieldError(t, err, "scheduler.tick", "env DELAYBRIDGE_SCHEDULER__TICK", "Go duration")
	_, err = load(t, "", nil, append(minimalRoute, "scheduler.tick=fast")...)
	mustFieldError(t, err, "scheduler.tick", "flag --set scheduler.tick", "Go duration")
	_, err = load(t, "", nil, append(minimalRoute, "routes.0.max_rate=lots")...)
	mustFieldError(t, err, "routes[0].max_rate", "flag --set routes.0.max_rate", "want a number")
	_, err = load(t, "", nil, append(minimalRoute, "redis.tls.enabled=yes")...)
	mustFieldError(t, err, "redis.tls.enabled", "flag --set redis.tls.enabled", "true or false")

	_, err = load(t, filepath.Join(t.TempDir(), "missing.yaml"), nil)
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	_, err = load(t, writeFile(t, "a: [\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "file ") {
		t.Errorf("broken yaml: %v", err)
	}
}

func TestLoadNullKeepsDefault(t *testing.T) {
	cfg, err := load(t, writeFile(t, "redis:\n  addrs:\n  password:\nkafka:\n"), nil, minimalRoute...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Redis.Addrs, Default().Redis.Addrs) || cfg.Kafka.GroupID != "delay-bridge" {
		t.Errorf("null must keep defaults: %+v %+v", cfg.Redis, cfg.Kafka)
	}
}

// Each validation error names its key and the source of the offending value.
func TestLoadValidationErrorsNameKeyAndSource(t *testing.T) {
	cases := []struct {
		set  string
		key  string
		want string
	}{
		{"cluster=a:b", "cluster", "must be non-empty"},
		{"shards=0", "shards", "between 1 and 16384"},
		{"prefix=", "prefix", "must be non-empty"},
		{"redis.addrs=", "redis.addrs", "at least one address"},
		{"redis.addrs=nohostport", "redis.addrs[0]", "host:port"},
		{"redis.min_replicas=-1", "redis.min_replicas", ">= 0"},
		{"scheduler.tick=0s", "scheduler.tick", "(0, 1s]"},
		{"scheduler.lookahead=2m", "scheduler.lookahead", "[0, 1m]"},
		{"scheduler.claim_batch=0", "scheduler.claim_batch", "between 1 and 100000"},
		{"scheduler.inflight_lease=10ms", "scheduler.inflight_lease", "at least 1s"},
		{"scheduler.lease_ttl=1ms", "scheduler.lease_ttl", "at least 100ms"},
		{"scheduler.safety_scan=5s", "scheduler.safety_scan", "(0, 1s]"},
		{"scheduler.max_in_memory=10", "scheduler.max_in_memory", ">= scheduler.claim_batch"},
		{"scheduler.max_in_memory_bytes=1000", "scheduler.max_in_memory_bytes", "at least 1048576"},
		{"scheduler.done_window=-1s", "scheduler.done_window", ">= 0"},
		{"scheduler.park_claim_horizon=16s", "scheduler.park_claim_horizon", "in [scheduler.lookahead (2s), scheduler.inflight_lease/2 (15s)]"},
		{"scheduler.park_claim_horizon=1s", "scheduler.park_claim_horizon", "0 (the lookahead) or in"},
		{"scheduler.cold_horizon=500ms", "scheduler.cold_horizon", "0 (off) or at least 1s"},
		{"scheduler.max_clock_offset=1ms", "scheduler.max_clock_offset", "[10ms, 1m]"},
		{"scheduler.max_clock_offset=2m", "scheduler.max_clock_offset", "[10ms, 1m]"},
		{"ingress.kafka_fetch_min_bytes=0", "ingress.kafka_fetch_min_bytes", "[1, 1048576]"},
		{"ingress.kafka_fetch_min_bytes=1048577", "ingress.kafka_fetch_min_bytes", "[1, 1048576]"},
		{"limits.max_delay=0s", "limits.max_delay", "> 0"},
		{"limits.max_payload_bytes=0", "limits.max_payload_bytes", "> 0"},
		{"retry.max_attempts=0", "retry.max_attempts", ">= 1"},
		{"retry.backoff.initial=0s", "retry.backoff.initial", "> 0"},
		{"retry.backoff.max=1ms", "retry.backoff.max", ">= retry.backoff.initial"},
		{"delivery=exactly-once", "delivery", "at-least-once"},
		{"kafka.brokers=", "kafka.brokers", "at least one broker"},
		{"kafka.group_id=", "kafka.group_id", "required"},
		{"kafka.sasl.mechanism=GSSAPI", "kafka.sasl.mechanism", "SCRAM-SHA-512"},
		{"admin.listen=8089", "admin.listen", "host:port"},
		{"log.level=verbose", "log.level", "debug, info"},
		{"log.format=xml", "log.format", "json or text"},
		{"routes.0.name=", "routes[0].name", "required"},
		{"routes.0.to.kafka.topic=in", "routes[0].to.kafka.topic", "loop"},
		{"routes.0.to.amqp.exchange=x", "routes[0].to", "not both"},
		{"routes.0.max_rate=-1", "routes[0].max_rate", ">= 0"},
		{"routes.0.order=fifo", "routes[0].order", `must be "key"`},
		{"routes.0.on_invalid=drop", "routes[0].on_invalid", "dead_letter"},
		{"routes.0.from.kafka.topic=", "routes[0].from.kafka.topic", "required"},
	}
	for _, c := range cases {
		t.Run(c.set, func(t *testing.T) {
			_, err := load(t, "", nil, append(append([]string{}, minimalRoute...), c.set)...)
			key, _, _ := strings.Cut(c.set, "=")
			mustFieldError(t, err, c.key, "flag --set "+key, c.want)
		})
	}

	// AMQP-only checks, with the value coming from the file and the environment.
	file := writeFile(t, `
amqp: {url: "http://x", prefetch: 0}
routes:
  - name: a
    from: {amqp: {queue: "", exchange_type: weird}}
    to: {amqp: {exchange: ""}}
  - name: a
    from: {}
    to: {kafka: {topic: t}}
`)
	src := "file " + file
	_, err := load(t, file, []string{"DELAYBRIDGE_AMQP__PREFETCH=70000"})
	mustFieldError(t, err, "amqp.url", src, "amqp://")
	mustFieldError(t, err, "amqp.prefetch", "env DELAYBRIDGE_AMQP__PREFETCH", "between 1 and 65535")
	mustFieldError(t, err, "routes[0].from.amqp.queue", src, "required")
	mustFieldError(t, err, "routes[0].from.amqp.exchange_type", src, "direct, topic")
	mustFieldError(t, err, "routes[0].to.amqp.exchange", src, "required")
	mustFieldError(t, err, "routes[1].name", src, "duplicate")
	mustFieldError(t, err, "routes[1].from", src, "set one of kafka or amqp")
	// A default that a check rejects because of another key names "default".
	_, err = load(t, "", nil, append(minimalRoute, "retry.backoff.initial=10m")...)
	mustFieldError(t, err, "retry.backoff.max", "default", ">= retry.backoff.initial")
	_, err = load(t, "", nil, append(minimalRoute, "kafka.sasl.mechanism=PLAIN")...)
	mustFieldError(t, err, "kafka.sasl.username", "default", "required with kafka.sasl.mechanism PLAIN")
}

func TestRedacted(t *testing.T) {
	cfg, err := load(t, writeFile(t, goodYAML), nil, "kafka.sasl.password=pw", "redis.master_name=mymaster", "redis.sentinel_password=spw")
	if err != nil {
		t.Fatal(err)
	}
	r := Redacted(cfg)
	if r.Redis.Password != Mask || r.Admin.Token != Mask || r.Kafka.SASL.Password != Mask || r.Redis.SentinelPassword != Mask {
		t.Errorf("secrets not masked: %+v %+v %+v", r.Redis, r.Admin, r.Kafka.SASL)
	}
	if r.AMQP.URL != "amqp://user:"+Mask+"@rabbit:5672/" {
		t.Errorf("amqp.url = %q", r.AMQP.URL)
	}
	if cfg.Redis.Password != "s3cret" || cfg.AMQP.URL != "amqp://user:pa55@rabbit:5672/" {
		t.Errorf("Redacted changed its argument")
	}
	r.Routes[0].To.Kafka.Topic = "changed"
	if cfg.Routes[0].To.Kafka.Topic != "orders" {
		t.Errorf("Redacted shares route endpoints with its argument")
	}
	if got := Redacted(Default()); got.Redis.Password != "" || got.AMQP.URL != "amqp://guest:"+Mask+"@127.0.0.1:5672/" {
		t.Errorf("default redacted: %q %q", got.Redis.Password, got.AMQP.URL)
	}

	out, err := MarshalYAML(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cret", "pa55", "tok\n", "pw\n"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("secret %q in output:\n%s", secret, out)
		}
	}
}

func TestMarshalYAMLRoundTrip(t *testing.T) {
	cfg, err := load(t, writeFile(t, goodYAML), nil, "routes.0.allow_targets=a,b")
	if err != nil {
		t.Fatal(err)
	}
	out, err := MarshalYAML(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"max_delay: 720h\n", "tick: 5ms\n", "inflight_lease: 30s\n", "max: 5m\n", "addrs: ['r1:6379', 'r2:6379']"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	again, err := load(t, writeFile(t, string(out)), nil)
	if err != nil {
		t.Fatalf("reloading the output: %v\n%s", err, out)
	}
	out2, err := MarshalYAML(again)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(out2) {
		t.Errorf("round trip differs:\n%s\n----\n%s", out, out2)
	}
	if !reflect.DeepEqual(again.Routes[0], cfg.Routes[0]) || again.Scheduler != cfg.Scheduler {
		t.Errorf("round trip differs:\n%+v\n%+v", again, cfg)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Millisecond: "1ms", 8760 * time.Hour: "8760h", 5 * time.Minute: "5m",
		90 * time.Minute: "1h30m", time.Hour + 5*time.Second: "1h0m5s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", time.Duration(d), got, want)
		}
	}
}

// The sentinels' credentials only mean something with Sentinel: without master_name the
// addresses are data servers, and a sentinel password there is a mistake worth naming.
func TestSentinelPasswordNeedsMasterName(t *testing.T) {
	_, err := load(t, writeFile(t, goodYAML), nil, "redis.sentinel_password=spw")
	if err == nil || !strings.Contains(err.Error(), "redis.sentinel_password") {
		t.Fatalf("sentinel_password without master_name: %v, want an error naming redis.sentinel_password", err)
	}
	if _, err := load(t, writeFile(t, goodYAML), nil, "redis.sentinel_password=spw", "redis.master_name=m"); err != nil {
		t.Fatalf("sentinel_password with master_name: %v", err)
	}
}
