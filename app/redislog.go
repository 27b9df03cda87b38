package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RouteRedisLogs sends go-redis's own log lines (connection pool dial failures,
// Sentinel and Cluster topology changes) to logger at debug level, tagged
// component=go-redis, instead of the standard library logger's plain text on stderr —
// so a JSON log stays JSON. They are debug: what matters to an operator (Redis
// unreachable, a failover) the bridge logs itself at info or warn, and /readyz shows.
// go-redis has one process-wide logger, so this is called once by the process.
func RouteRedisLogs(logger *slog.Logger) {
	redis.SetLogger(redisLogger{log: logger.With("component", "go-redis")})
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	l.log.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}
