package scheduler

import "github.com/delaybridge/delay-bridge/store/storeapi"

// Store is what the scheduler needs from the shard store: the roles of the one store
// contract, storeapi.Store, that ownership, the pumps, the completer and the intake
// use (each method's written contract is in package storeapi). store/redisstore
// implements it on Redis and store/memstore in memory; both pass the one
// store conformance suite (store/storetest).
type Store interface {
	storeapi.Sharding
	storeapi.Membership
	storeapi.Leases
	storeapi.Intake
	storeapi.Delivery
	storeapi.ByID
	storeapi.Notifier
}
