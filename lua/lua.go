// Package lua holds the Redis Lua scripts of the shard store, one operation per file,
// embedded into the binary. Each script file starts with a comment stating its KEYS
// (one `-- KEYS[i] <role>` per line, role being the key's name after its hash tag:
// store/redisstore's TestScriptKeysMatchHeaders checks them against every call), ARGV
// and return value; the shard store (store/redisstore*.go) is the contract's Go
// side, and package membership runs the lease_* scripts on Kafka partition leases too.
//
// Helpers live in includes/, one concern per file (counts, index, cold, kbmark,
// successor, order, routes, zset, num, envelope). A file names what it uses with
// `--- @include "<name>"` lines; the loader (load.go) puts every helper a script needs in front of it, each once and
// after what it includes itself, and makes the script's body the function
// `local function <name>(KEYS, ARGV)`, so a wrapper calls the script it wraps
// (ordered_park calls park). Helpers take keys as arguments, never KEYS.
//
// The scripts are called as one Redis Functions library (NewLibrary): FUNCTION LOAD
// defines the helpers once per server, and a call (FCALL) runs only its own body. The
// library is named "delaybridge_<hash>" after its code, its functions "<script>_<hash>",
// so two builds of a rolling upgrade load two libraries and each calls its own. Where
// the server has no FUNCTION command (the embedded server of `bridge dev`, Redis 6) the
// same helpers and body are assembled per script for EVALSHA (Library.Eval).
// docs/ARCHITECTURE.md "Scripts: loading and calling" gives the measured reasons.
//
// Conventions every script keeps, because the store relies on them:
//   - a library's top level lives across calls, so it holds only functions and
//     constants: per-call state is a table a script makes (cstart, ixstart, costart,
//     ostart) and passes to the helpers, and no code reads or writes a global
//     (TestLibraryKeepsNoState);
//   - a call reads only what it needs: the counts are written, never read; the index
//     state is read when a call first looks up or records an id (ixload);
//   - every key is passed in KEYS, and all keys of one call share one Redis Cluster
//     hash tag, so a script touches exactly one slot. The one exception is index.lua:
//     the index sub-hashes and done slices of the store are many keys whose names
//     depend on the data, so it builds them by appending to a key passed in KEYS (the
//     shard's P:{C:n}:ix and P:{C:n}:dn), which keeps the hash tag and so the slot.
//     cold.lua is the second: the cold tier's buckets P:{C:n}:cb:<b> are named after
//     the shard's due key. Their callers also pass the shard's P:{C:n}:slotguard after
//     the script's own KEYS, a key nothing writes, so Redis Cluster refuses the call
//     while the slot migrates instead of the script meeting half-moved keys
//     (store/redisstore/slotguard.go);
//   - times are integer unix milliseconds passed in ARGV (never TIME), so tests can
//     inject time and the scripts stay deterministic for replication;
//   - batches are bounded by the caller or by a LIMIT argument, so no call blocks Redis
//     for long however large a shard grows, and a batch is read and written with
//     whole-batch commands (HMGET, HSET, HDEL, ZADD, ZREM, ZMSCORE) rather than one
//     command per message where one command can do it.
//
// The scripts use only commands that Redis 6+ and the embedded Redis-compatible server
// of `bridge dev` both run; ZMSCORE (Redis 6.2) is called through zpresent, which falls
// back to ZSCORE per id where the server lacks it.
package lua

import _ "embed"

// Scripts are the scripts of the shard store's library (NewLibrary), by file name
// without ".lua". The ordered_* scripts wrap park, ack, retry, recover, cancel,
// reschedule and replace with per-key order (ordered_park.lua and the others).
var Scripts = []string{
	"park", "replace", "bury", "cancel", "claim", "ack", "retry", "recover", "reschedule",
	"get", "purge_dead", "purge_dead_ids", "browse", "cold_read", "bucket_flush",
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
// key names apart from ColdHelper, BucketHelper and MarkHelper (tests look for others that do).
var IndexHelper = helper("index")

// MarkHelper is kbmark.lua, index.lua's marks of the Kafka blocks with index entries,
// which names its hash after the index's key.
var MarkHelper = helper("kbmark")

// ColdHelper is cold.lua, the helper of the cold tier, which names the shard's bucket
// keys after its due key.
var ColdHelper = helper("cold")

// BucketHelper is bucket.lua, the helper of the due buckets, which names their keys
// after the shard's due key.
var BucketHelper = helper("bucket")

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
