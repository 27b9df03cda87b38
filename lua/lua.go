// Package lua holds the Redis Lua scripts of the shard store, one operation per file,
// embedded into the binary. Each file starts with a comment stating its KEYS, ARGV and
// return value; the shard store (scheduler/store*.go) is the contract's Go side, and
// package membership runs the lease_* scripts on Kafka partition leases too.
//
// Conventions every script keeps, because the store relies on them:
//   - every key is passed in KEYS, never built inside the script, and all keys of one
//     call share one Redis Cluster hash tag, so a script touches exactly one slot;
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
// of those that move messages (they keep the per-route counts).
var (
	//go:embed routes.lua
	routes string
	//go:embed counts.lua
	counts string
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
	Park           = routes + counts + park
	Bury           = routes + counts + bury
	Cancel         = routes + counts + cancel
	Claim          = counts + claim
	Ack            = counts + ack
	Retry          = counts + retry
	Recover        = counts + recover
	Reschedule     = counts + reschedule
	PurgeDead      = counts + purgeDead
	PurgeDeadIDs   = counts + purgeDeadIDs
	CountsBackfill = counts + countsBackfill
)

// Script sources, named after their files.
var (
	//go:embed get.lua
	Get string
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

// All returns every script by name (the file name without ".lua"), for callers that
// preload or inspect them all, such as tests and the dev server.
func All() map[string]string {
	return map[string]string{
		"park":            Park,
		"bury":            Bury,
		"claim":           Claim,
		"ack":             Ack,
		"retry":           Retry,
		"recover":         Recover,
		"cancel":          Cancel,
		"reschedule":      Reschedule,
		"get":             Get,
		"purge_dead":      PurgeDead,
		"browse":          Browse,
		"purge_dead_ids":  PurgeDeadIDs,
		"counts_backfill": CountsBackfill,
		"job_claim":       JobClaim,
		"job_save":        JobSave,
		"job_cancel":      JobCancel,
		"lease_acquire":   LeaseAcquire,
		"lease_renew":     LeaseRenew,
		"lease_release":   LeaseRelease,
		"schedule_put":    SchedulePut,
		"schedule_delete": ScheduleDelete,
		"schedule_plan":   SchedulePlan,
	}
}
