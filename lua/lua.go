// Package lua holds the Redis Lua scripts of the shard store, one operation per file,
// embedded into the binary. Each file starts with a comment stating its KEYS, ARGV and
// return value; the shard store (scheduler/store*.go) is the contract's Go side, and
// package membership runs the lease_* scripts on Kafka partition leases too.
//
// Conventions every script keeps, because the store relies on them:
//   - every key is passed in KEYS, and all keys of one call share one Redis Cluster
//     hash tag, so a script touches exactly one slot. The one exception is index.lua:
//     the index sub-hashes and done slices of the store are many keys whose names
//     depend on the data, so it builds them by appending to a key passed in KEYS (the
//     shard's P:{C:n}:ix and P:{C:n}:dn), which keeps the hash tag and so the slot.
//     cold.lua is the second: the cold tier's buckets P:{C:n}:cb:<b> are named after
//     the shard's due key. Their callers also pass the shard's P:{C:n}:slotguard after the script's own
//     KEYS, a key nothing writes, so Redis Cluster refuses the call while the slot
//     migrates instead of the script meeting half-moved keys (scheduler/store/slotguard.go);
//   - times are integer unix milliseconds passed in ARGV (never TIME), so tests can
//     inject time and the scripts stay deterministic for replication;
//   - batches are bounded by the caller or by a LIMIT argument, so no call blocks Redis
//     for long however large a shard grows.
//
// The scripts use only commands that Redis 6+ and the embedded Redis-compatible server
// of `bridge dev` both run.
package lua

import _ "embed"

// Scripts are the scripts of the shard store's library (NewLibrary), by file name
// without ".lua". The ordered_* scripts wrap park, ack, retry, recover, cancel,
// reschedule and replace with per-key order (ordered_park.lua and the others).
var Scripts = []string{
	"park", "replace", "bury", "cancel", "claim", "ack", "retry", "recover", "reschedule",
	"get", "purge_dead", "purge_dead_ids", "browse", "cold_read",
	"job_claim", "job_save", "job_cancel", "lease_acquire", "lease_renew", "lease_release",
	"schedule_put", "schedule_delete", "schedule_plan",
	"ordered_park", "ordered_ack", "ordered_retry", "ordered_recover", "ordered_cancel",
	"ordered_reschedule", "ordered_replace",
}

// The lease scripts, for package membership, which runs them with EVALSHA on Kafka
// partition leases (they include no helper).
var (
	//go:embed lease_acquire.lua
	LeaseAcquire string
	//go:embed lease_renew.lua
	LeaseRenew string
	//go:embed lease_release.lua
	LeaseRelease string
)

// helper is the text of helper file name as the loader puts it in front of a script.
func helper(name string) string {
	u, err := newLoader(nil).unit(name)
	if err != nil {
		panic(err)
	}
	return u.text
}

// IndexHelper is index.lua, the helper of the done window: the only source that builds
// key names apart from ColdHelper (tests look for others that do).
var IndexHelper = helper("index")

// ColdHelper is cold.lua, the helper of the cold tier, which names the shard's bucket
// keys after its due key.
var ColdHelper = helper("cold")

// All returns every script's EVAL source by name, for callers that inspect them all,
// such as tests.
func All() map[string]string {
	lib, err := NewLibrary("delaybridge", Scripts)
	if err != nil {
		panic(err)
	}
	out := make(map[string]string, len(Scripts))
	for _, n := range Scripts {
		out[n] = lib.Eval(n)
	}
	return out
}
