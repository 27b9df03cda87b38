package app

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/store/redisstore"
)

// NewRedis builds the UniversalClient for redis.*: one address is a standalone server,
// several are a Redis Cluster, and master_name selects Sentinel (addrs are sentinels).
func NewRedis(c config.RedisConfig) (redis.UniversalClient, error) {
	var tlsCfg *tls.Config
	if c.TLS.Enabled {
		var err error
		if tlsCfg, err = c.TLS.ClientTLS(); err != nil {
			return nil, fmt.Errorf("redis.%w", err)
		}
	}
	opt := &redis.UniversalOptions{
		Addrs:      c.Addrs,
		Username:   c.Username,
		Password:   c.Password,
		DB:         c.DB,
		MasterName: c.MasterName,
		// The sentinels' own credentials; empty means they are asked without AUTH.
		SentinelUsername: c.SentinelUsername,
		SentinelPassword: c.SentinelPassword,
		TLSConfig:        tlsCfg,
		DialTimeout:      2 * time.Second,
		ReadTimeout:      3 * time.Second,
		WriteTimeout:     3 * time.Second,
		// Pipelined park/claim calls run from many goroutines (one pump per shard).
		PoolSize: 64,
		// Retries inside go-redis would hide an outage from the callers that must
		// react to it (ingress stops committing, pumps back off), so keep them short.
		MaxRetries:      1,
		MinRetryBackoff: 8 * time.Millisecond,
		MaxRetryBackoff: 128 * time.Millisecond,
	}
	if len(c.Addrs) > 1 && c.MasterName == "" {
		opt.IsClusterMode = true
	}
	return redis.NewUniversalClient(opt), nil
}

// newHealth watches rdb (before its first command) for Redis's eviction policy and for
// writes refused for lack of memory. The policy is read on every ownership round, at
// most about once per round interval (scheduler.lease_ttl / 3).
func newHealth(rdb redis.UniversalClient, cfg config.Config, opts Options) *redisstore.Health {
	return redisstore.NewHealth(rdb, redisstore.HealthOptions{
		AllowEviction: cfg.Redis.AllowEviction, MasterName: cfg.Redis.MasterName, MinInterval: cfg.Scheduler.LeaseTTL / 4,
		Observer: opts.Observer, Logger: opts.Logger, Clock: opts.Clock,
	})
}
