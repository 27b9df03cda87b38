package redisstore

import "github.com/delaybridge/delay-bridge/store/storeapi"

// The Store implements the shard store contract, storeapi.Store. The contract's types,
// constants and errors are defined there, once; the aliases below only let this
// package's code name them unqualified. Every other package names storeapi.

var _ storeapi.Store = (*Store)(nil)

type (
	State          = storeapi.State
	Member         = storeapi.Member
	Lease          = storeapi.Lease
	RetryItem      = storeapi.RetryItem
	CancelOptions  = storeapi.CancelOptions
	ShardStat      = storeapi.ShardStat
	RouteCount     = storeapi.RouteCount
	ShardCounts    = storeapi.ShardCounts
	Counts         = storeapi.Counts
	BrowseQuery    = storeapi.BrowseQuery
	BrowseItem     = storeapi.BrowseItem
	BrowsePage     = storeapi.BrowsePage
	JobKind        = storeapi.JobKind
	JobState       = storeapi.JobState
	JobFilter      = storeapi.JobFilter
	JobSpec        = storeapi.JobSpec
	JobSample      = storeapi.JobSample
	JobProgress    = storeapi.JobProgress
	Job            = storeapi.Job
	BatchItem      = storeapi.BatchItem
	BatchResult    = storeapi.BatchResult
	RescheduleItem = storeapi.RescheduleItem
)

const (
	StatePending   = storeapi.StatePending
	StateInflight  = storeapi.StateInflight
	StateDead      = storeapi.StateDead
	StateDelivered = storeapi.StateDelivered
	StateCancelled = storeapi.StateCancelled
	StateUnknown   = storeapi.StateUnknown
	StateNotStored = storeapi.StateNotStored

	BrowseDefaultLimit = storeapi.BrowseDefaultLimit
	BrowseMaxLimit     = storeapi.BrowseMaxLimit

	JobCancel      = storeapi.JobCancel
	JobReschedule  = storeapi.JobReschedule
	JobRequeueDead = storeapi.JobRequeueDead
	JobPurgeDead   = storeapi.JobPurgeDead
	JobQueued      = storeapi.JobQueued
	JobRunning     = storeapi.JobRunning
	JobDone        = storeapi.JobDone
	JobFailed      = storeapi.JobFailed
	JobCancelled   = storeapi.JobCancelled
	JobAbandoned   = storeapi.JobAbandoned
	JobHeartbeat   = storeapi.JobHeartbeat
	JobStaleAfter  = storeapi.JobStaleAfter
	JobRetention   = storeapi.JobRetention
	JobSampleMax   = storeapi.JobSampleMax
)

var (
	ErrFenced        = storeapi.ErrFenced
	ErrShardCount    = storeapi.ErrShardCount
	ErrStoreFormat   = storeapi.ErrStoreFormat
	ErrNotReplicated = storeapi.ErrNotReplicated
	ErrNotFound      = storeapi.ErrNotFound
	ErrInvalid       = storeapi.ErrInvalid
	ErrOtherRoute    = storeapi.ErrOtherRoute
	ErrOrdered       = storeapi.ErrOrdered
	ErrBadCursor     = storeapi.ErrBadCursor
	ErrJobNotFound   = storeapi.ErrJobNotFound
	ErrJobLost       = storeapi.ErrJobLost
)
