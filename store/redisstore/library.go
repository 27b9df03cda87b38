package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/lua"
)

// How scripts are loaded and called (docs/ARCHITECTURE.md "Scripts: loading and
// calling"). Every script of the store is a function of one Redis Functions library,
// loaded with FUNCTION LOAD REPLACE on every master at start and called with FCALL, so
// a call runs only its own body: the helpers were defined once, when the library was
// loaded. Where the server has no FUNCTION command (the embedded server of `bridge
// dev`, Redis 6) each script runs with EVALSHA (EVAL on NOSCRIPT) of the same helpers
// and body assembled per script (lua.Library.Eval); New detects which once.

// library is the build's library; its name and function names carry the hash of its
// code, so two builds of a rolling upgrade each call their own functions.
var library = mustLibrary()

func mustLibrary() *lua.Library {
	lib, err := lua.NewLibrary("delaybridge", lua.Scripts)
	if err != nil {
		panic(err) // the embedded sources are broken: a build error, caught by every test
	}
	return lib
}

// script is one script of the store: its metrics name, its function in the library
// (none for a script outside it), and its EVAL source.
type script struct {
	name string
	fn   string
	*redis.Script
}

// newScript is script unit of the library, reported as name.
func newScript(name, unit string) *script {
	src := library.Eval(unit)
	if src == "" {
		panic("store: no script " + unit + " in the library")
	}
	return &script{name: name, fn: library.Function(unit), Script: redis.NewScript(src)}
}

// evalScript is a script run with EVALSHA only, outside the library.
func evalScript(name, src string) *script {
	return &script{name: name, Script: redis.NewScript(src)}
}

// functions is the store's calling mode and the library's load generation.
type functions struct {
	on  atomic.Bool   // FCALL; false: EVALSHA/EVAL
	gen atomic.Uint64 // bumped by every load, so concurrent reloads collapse into one
	mu  sync.Mutex
}

// initScripts decides the calling mode: FUNCTION LOAD REPLACE of the library on every
// master succeeds, or the server has no FUNCTION command and every script is loaded
// with SCRIPT LOAD instead. Either way a broken script is a start-up error rather than
// a failure on the first message.
func (s *Store) initScripts(ctx context.Context) error {
	err := s.loadLibrary(ctx, s.fns.gen.Load())
	switch {
	case err == nil:
		s.fns.on.Store(true)
		return nil
	case !noFunctions(err):
		return err
	}
	for _, sc := range s.scripts() {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("scheduler: load script %s: %w", sc.name, redisErr(err))
		}
	}
	return nil
}

// Functions reports whether the store calls its scripts with FCALL (Redis Functions)
// rather than EVALSHA.
func (s *Store) Functions() bool { return s.fns.on.Load() }

// loadLibrary loads the library with FUNCTION LOAD REPLACE on every master (on Redis
// Cluster; on the one server, or Sentinel's master, otherwise), unless it was loaded
// again since generation gen was read (another caller that met "function not found"
// at the same time did it).
func (s *Store) loadLibrary(ctx context.Context, gen uint64) error {
	s.fns.mu.Lock()
	defer s.fns.mu.Unlock()
	if s.fns.gen.Load() != gen {
		return nil
	}
	load := func(ctx context.Context, c redis.Cmdable) error {
		if err := c.FunctionLoadReplace(ctx, library.Code).Err(); err != nil {
			return fmt.Errorf("scheduler: FUNCTION LOAD %s: %w", library.Name, err)
		}
		return nil
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	} else {
		err = load(ctx, s.rdb)
	}
	if err == nil {
		s.fns.gen.Add(1)
	}
	return err
}

// noFunctions says whether a FUNCTION LOAD failed because the server has no Redis
// Functions (an unknown command) or the user may not use them (an ACL refusal),
// rather than because the library is broken.
func noFunctions(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := strings.ToLower(rerr.Error())
	return strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "noperm")
}

// isNoFunction says whether err is FCALL's reply for a function the server does not
// have: a new or flushed master, or a restarted one without persistence. The call did
// nothing; the library is loaded again and the call sent again.
func isNoFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// fcalls says whether sc is called with FCALL.
func (s *Store) fcalls(sc *script) bool { return sc.fn != "" && s.fns.on.Load() }

// run is one call of sc on c: FCALL (loading the library again and retrying once when
// the server does not have it), else EVALSHA with the EVAL fallback.
func (s *Store) run(ctx context.Context, c redis.Cmdable, sc *script, keys []string, args ...any) *redis.Cmd {
	if !s.fcalls(sc) {
		return sc.Run(ctx, c, keys, args...)
	}
	gen := s.fns.gen.Load()
	cmd := c.FCall(ctx, sc.fn, keys, args...)
	if !isNoFunction(cmd.Err()) {
		return cmd
	}
	if err := s.loadLibrary(ctx, gen); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	return c.FCall(ctx, sc.fn, keys, args...)
}

// queue adds one call of sc to pipe: FCALL, else EVALSHA (or EVAL with viaEval).
func (s *Store) queue(ctx context.Context, pipe redis.Pipeliner, sc *script, viaEval bool, keys []string, args ...any) *redis.Cmd {
	switch {
	case s.fcalls(sc):
		return pipe.FCall(ctx, sc.fn, keys, args...)
	case viaEval:
		return sc.Eval(ctx, pipe, keys, args...)
	default:
		return sc.EvalSha(ctx, pipe, keys, args...)
	}
}
