// Package lua holds the Redis Lua scripts of the shard store, one operation per file,
// embedded into the binary. Each file starts with a comment stating its KEYS, ARGV and
// return value; the shard store (scheduler/store*.go) is the contract's Go side, and
// package membership runs the lease_* scripts on Kafka partition leases too.
//
// Conventions every script keeps, because the store relies on them:
//   - every key is passed in KEYS, and all keys of one call share one Redis Cluster
//     hash tag, so a script touches exactly one slot. Three helpers build key names
//     whose parts depend on the data, each by appending to a key passed in KEYS, which
//     keeps the hash tag and so the slot: index.lua (the index sub-hashes and done
//     slices of store layout 3, after the shard's P:{C:n}:ix and P:{C:n}:dn), cold.lua
//     (the cold tier's buckets P:{C:n}:cb:<b>, after the shard's due key) and order.lua
//     (a key's ZSET P:{C:n}:ko:<route>\0<key>, after the shard's ko key). The callers of
//     index.lua and cold.lua also pass the shard's P:{C:n}:slotguard after the
//     script's own KEYS, a key nothing writes, so Redis Cluster refuses the call while
//     the slot migrates instead of the script meeting half-moved keys
//     (scheduler/store/slotguard.go);
//   - times are integer unix milliseconds passed in ARGV (never TIME), so tests can
//     inject time and the scripts stay deterministic for replication;
//   - batches are bounded by the caller or by a LIMIT argument, so no call blocks Redis
//     for long however large a shard grows.
//
// The scripts use only commands that Redis 6+ and the embedded Redis-compatible server
// of `bridge dev` both run.
package lua

import _ "embed"

// routes.lua is put in front of the scripts that read route lists, counts.lua in front
// of those that move messages (they keep the per-route counts), index.lua in front of
// those that read or write the done window of layout 3, successor.lua in front of
// those that take a message out of in flight or read it by id (replace's successors).
var (
	//go:embed routes.lua
	routes string
	//go:embed counts.lua
	counts string
	//go:embed index.lua
	index string
	//go:embed successor.lua
	successor string
	//go:embed cold.lua
	cold string
	//go:embed replace.lua
	replace string
	//go:embed park.lua
	park string
	//go:embed bury.lua
	bury string
	//go:embed cancel.lua
	cancel string
	//go:embed claim.lua
	claim string
	//go:embed ack.lua
	ack string
	//go:embed retry.lua
	retry string
	//go:embed recover.lua
	recover string
	//go:embed reschedule.lua
	reschedule string
	//go:embed purge_dead.lua
	purgeDead string
	//go:embed purge_dead_ids.lua
	purgeDeadIDs string
	//go:embed counts_backfill.lua
	countsBackfill string
)

// The scripts that move messages, with their helpers in front.
var (
	Park           = routes + counts + index + cold + park
	Replace        = routes + counts + index + successor + cold + replace
	Bury           = routes + counts + index + cold + bury
	Cancel         = routes + counts + index + successor + cold + cancel
	Claim          = counts + index + cold + claim
	Ack            = counts + index + successor + ack
	Retry          = counts + successor + retry
	Recover        = counts + successor + recover
	Reschedule     = counts + index + cold + reschedule
	PurgeDead      = counts + purgeDead
	PurgeDeadIDs   = counts + purgeDeadIDs
	CountsBackfill = counts + index + cold + countsBackfill
)

// IndexHelper is index.lua, the helper put in front of the scripts of layout 3's done
// window: the only source that builds key names (tests look for others that do).
var IndexHelper = index

// ColdHelper is cold.lua, the helper of the cold tier (layout 3, level 5), which names
// the shard's bucket keys after its due key (tests look for other sources that build
// key names).
var ColdHelper = cold

// Get is get.lua with its helper in front.
var Get = counts + index + successor + cold + get

//go:embed cold_read.lua
var coldRead string

// ColdRead is cold_read.lua (browse, counts and edges of the cold tier) with its
// helpers in front.
var ColdRead = counts + index + cold + coldRead

// Script sources, named after their files.
var (
	//go:embed get.lua
	get string
	//go:embed browse.lua
	Browse string
	//go:embed job_claim.lua
	JobClaim string
	//go:embed job_save.lua
	JobSave string
	//go:embed job_cancel.lua
	JobCancel string
	//go:embed lease_acquire.lua
	LeaseAcquire string
	//go:embed lease_renew.lua
	LeaseRenew string
	//go:embed lease_release.lua
	LeaseRelease string
	//go:embed schedule_put.lua
	SchedulePut string
	//go:embed schedule_delete.lua
	ScheduleDelete string
	//go:embed schedule_plan.lua
	SchedulePlan string
)

// The layout-2 scripts (v2/, as the release before layout 3 ran them) that differ in
// layout 3: a store writes with them while a bridge of that release is a live member
// (compat mode), and BenchmarkStoreLayout measures them as the baseline.
var (
	//go:embed v2/park.lua
	v2park string
	//go:embed v2/bury.lua
	v2bury string
	//go:embed v2/cancel.lua
	v2cancel string
	//go:embed v2/ack.lua
	v2ack string
	//go:embed v2/get.lua
	v2get string
	//go:embed v2/reschedule.lua
	v2reschedule string

	V2Park       = routes + counts + v2park
	V2Bury       = routes + counts + v2bury
	V2Cancel     = routes + counts + v2cancel
	V2Ack        = counts + v2ack
	V2Get        = v2get
	V2Reschedule = counts + v2reschedule
)

// All returns every script by name (the file name without ".lua"), for callers that
// preload or inspect them all, such as tests and the dev server.
func All() map[string]string {
	return map[string]string{
		"park":               Park,
		"replace":            Replace,
		"bury":               Bury,
		"claim":              Claim,
		"ack":                Ack,
		"retry":              Retry,
		"recover":            Recover,
		"cancel":             Cancel,
		"reschedule":         Reschedule,
		"get":                Get,
		"purge_dead":         PurgeDead,
		"browse":             Browse,
		"cold_read":          ColdRead,
		"purge_dead_ids":     PurgeDeadIDs,
		"counts_backfill":    CountsBackfill,
		"job_claim":          JobClaim,
		"job_save":           JobSave,
		"job_cancel":         JobCancel,
		"lease_acquire":      LeaseAcquire,
		"lease_renew":        LeaseRenew,
		"lease_release":      LeaseRelease,
		"schedule_put":       SchedulePut,
		"schedule_delete":    ScheduleDelete,
		"schedule_plan":      SchedulePlan,
		"ordered_park":       OrderedPark,
		"ordered_ack":        OrderedAck,
		"ordered_retry":      OrderedRetry,
		"ordered_recover":    OrderedRecover,
		"ordered_cancel":     OrderedCancel,
		"ordered_reschedule": OrderedReschedule,
		"v2/park":            V2Park,
		"v2/bury":            V2Bury,
		"v2/cancel":          V2Cancel,
		"v2/ack":             V2Ack,
		"v2/get":             V2Get,
		"v2/reschedule":      V2Reschedule,
	}
}
