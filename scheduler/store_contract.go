package scheduler

import "github.com/delaybridge/delay-bridge/scheduler/storeapi"

// Store is what the scheduler needs from the shard store: the roles of the one store
// contract, storeapi.Store, that ownership, the pumps, the completer and the intake
// use (each method's written contract is in package storeapi). scheduler/store
// implements it on Redis and internal/testkit/memstore in memory; both pass the one
// store conformance suite (internal/testkit/storetest).
type Store interface {
	storeapi.Sharding
	storeapi.Membership
	storeapi.Leases
	storeapi.Intake
	storeapi.Delivery
	storeapi.ByID
	storeapi.Notifier
}
