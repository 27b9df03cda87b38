// Package redisstore is the Redis implementation of the shard store contract
// (store/storeapi.Store): every operation on parked, in-flight, dead and delivered
// messages, leases, counts, bulk jobs and schedules is one Lua script call (package lua)
// per shard, pipelined across shards, on standalone Redis, Sentinel or Redis Cluster (a
// shard's keys share one hash slot). docs/ARCHITECTURE.md "Redis layout" describes the
// keys and "Inside the store" the files; store/storetest is the conformance
// suite it passes.
package redisstore
