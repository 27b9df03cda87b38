package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

// Options configure a Server.
type Options struct {
	// Addr is the listen address for Run ("127.0.0.1:8089").
	Addr string
	// Token, when non-empty, is required as "Authorization: Bearer <token>" on every
	// route except /healthz, /readyz and /metrics.
	Token string
	// Backend serves the /v1/ routes and /readyz. Required.
	Backend Backend
	// Gatherer is exposed on /metrics; nil = no /metrics route.
	Gatherer prometheus.Gatherer
	// Logger receives request failures; nil = slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body (413 beyond); default 4 MiB.
	MaxBodyBytes int64
	// RequestTimeout bounds each Backend call; default 30s. ReadyTimeout bounds
	// Backend.Ready; default 5s.
	RequestTimeout time.Duration
	ReadyTimeout   time.Duration
	// ShutdownTimeout is how long Run waits for requests in progress when its context
	// ends before cutting them off; default 10s.
	ShutdownTimeout time.Duration
	// PayloadCap bounds the payload GET /v1/messages/{id} shows; default
	// DefaultPayloadCap (64 KiB).
	PayloadCap int
	// Clock tells the time for GET /v1/lateness; nil = the wall clock.
	Clock clock.Clock
}

// Server is the admin HTTP API. It is an http.Handler; Run and Serve listen.
type Server struct {
	opt       Options
	log       *slog.Logger
	mux       *http.ServeMux
	tokenHash [sha256.Size]byte
	patterns  []string // every mux pattern, for the OpenAPI coverage test
	lateness  *latenessWindow
}

// Default limits of the dead-letter listing (the browse limits).
const (
	DefaultDeadLimit = DefaultBrowseLimit
	MaxDeadLimit     = MaxBrowseLimit
)

// NewServer builds a Server. It panics if opts.Backend is nil.
func NewServer(opts Options) *Server {
	if opts.Backend == nil {
		panic("admin: NewServer without a Backend")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 5 * time.Second
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	if opts.PayloadCap <= 0 {
		opts.PayloadCap = DefaultPayloadCap
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	s := &Server{opt: opts, log: opts.Logger, mux: http.NewServeMux()}
	s.tokenHash = sha256.Sum256([]byte(opts.Token))

	s.lateness = newLatenessWindow(opts.Gatherer, opts.Clock)
	s.handle("POST /v1/messages", s.handleSchedule)
	s.handle("GET /v1/messages", s.handleBrowse)
	// {id...}: ids derived from Kafka positions contain "/" (topic/partition/offset).
	// Clients should percent-encode them (%2F), which every route accepts; GET and
	// DELETE also accept them unencoded.
	s.handle("GET /v1/messages/{id...}", s.handleGet)
	s.handle("DELETE /v1/messages/{id...}", s.handleCancel)
	s.handle("POST /v1/messages/{id}/reschedule", s.handleReschedule)
	s.handle("GET /v1/stats", s.handleStats)
	s.handle("GET /v1/routes", s.handleRoutes)
	s.handle("GET /v1/lateness", s.handleLateness)
	s.handle("GET /v1/series", s.handleSeries)
	s.handle("GET /v1/dead", s.handleListDead)
	s.handle("POST /v1/dead/{id}/requeue", s.handleRequeue)
	s.handle("DELETE /v1/dead", s.handlePurge)
	s.handle("POST /v1/jobs", s.handleCreateJob)
	s.handle("GET /v1/jobs", s.handleListJobs)
	s.handle("GET /v1/jobs/{id}", s.handleGetJob)
	s.handleSchedules()
	s.handleKeys()
	s.handle("GET /v1/openapi.json", handleOpenAPI)
	s.handle("GET /ui/", handleConsole)
	s.handle("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	s.handle("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.handle("GET /readyz", s.handleReady)
	if opts.Gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{
			ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelError),
		}))
		s.patterns = append(s.patterns, "GET /metrics")
	}
	return s
}

func (s *Server) handle(pattern string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, h)
	s.patterns = append(s.patterns, pattern)
}

// openPath reports whether a path is served without the token: the probes, the
// scraper, the API description and the console's static files (which hold no data;
// the console sends the token with every API call).
func openPath(p string) bool {
	switch p {
	case "/healthz", "/readyz", "/metrics", "/v1/openapi.json", "/":
		return true
	}
	return strings.HasPrefix(p, "/ui/") || p == "/ui"
}

// ServeHTTP authenticates, then routes. Unknown paths and methods get JSON 404/405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opt.Token != "" && !openPath(r.URL.Path) && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="delay-bridge"`)
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token", "")
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		s.mux.ServeHTTP(&jsonErrorWriter{ResponseWriter: w}, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) == 1
}

// jsonErrorWriter turns the mux's plain-text 404/405 into JSON errors (keeping Allow).
type jsonErrorWriter struct {
	http.ResponseWriter
	swallow bool
}

func (w *jsonErrorWriter) WriteHeader(code int) {
	if code < 400 {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.swallow = true
	w.Header().Del("Content-Length")
	writeError(w.ResponseWriter, code, strings.ToLower(http.StatusText(code)), "")
}

func (w *jsonErrorWriter) Write(b []byte) (int, error) {
	if w.swallow {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Run listens on Options.Addr and serves until ctx ends, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.opt.Addr)
	if err != nil {
		return fmt.Errorf("admin: listen %s: %w", s.opt.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln (which it closes) until ctx ends. Then it stops accepting, waits
// up to ShutdownTimeout for requests in progress, cancels and cuts off what remains,
// and returns nil. It returns an error only if serving fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.log.Info("admin API listening", "addr", ln.Addr().String(), "auth", s.opt.Token != "")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if s.opt.Gatherer != nil {
		// Lateness snapshots, so GET /v1/lateness covers the recent minutes even when
		// nobody asked before; stopped and waited for before Serve returns.
		sampCtx, stopSampling := context.WithCancel(ctx)
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			s.lateness.run(sampCtx, func(err error) { s.log.Debug("lateness snapshot failed", "err", err) })
		}()
		defer func() { stopSampling(); <-sampled }()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("admin: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opt.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("admin API: requests still running at shutdown, cutting them off", "err", err)
		cancelReqs()
		_ = srv.Close()
	}
	<-errc // http.ErrServerClosed
	return nil
}

// ---- handlers --------------------------------------------------------------------

func (s *Server) call(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.opt.RequestTimeout)
}

// decode reads a strict JSON body into v, answering 400/413 itself on failure.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body := http.MaxBytesReader(w, r.Body, s.opt.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.More() {
			err = errors.New("trailing data after the JSON object")
		} else if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err == nil {
		return true
	}
	var (
		maxErr  *http.MaxBytesError
		typeErr *json.UnmarshalTypeError
		synErr  *json.SyntaxError
	)
	switch {
	case errors.As(err, &maxErr):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxErr.Limit), "")
	case errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, "empty request body: want a JSON object", "")
	case errors.Is(err, io.ErrUnexpectedEOF):
		writeError(w, http.StatusBadRequest, "malformed JSON: unexpected end of the body", "")
	case errors.As(err, &typeErr) && typeErr.Field == "":
		writeError(w, http.StatusBadRequest, fmt.Sprintf("want a JSON object, got %s", typeErr.Value), "")
	case errors.As(err, &typeErr):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: want %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value), typeErr.Field)
	case errors.As(err, &synErr):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("malformed JSON at byte %d: %v", synErr.Offset, err), "")
	default:
		msg := strings.TrimPrefix(err.Error(), "json: ")
		field := ""
		if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
			field, _ = strconv.Unquote(f)
		}
		var ie *InvalidError
		if errors.As(err, &ie) {
			field, msg = ie.Field, ie.Error()
		}
		writeError(w, http.StatusBadRequest, msg, field)
	}
	return false
}

func parseWhen(delayMs *int64, deliverAt *Timestamp) (When, error) {
	switch {
	case delayMs != nil && deliverAt != nil:
		return When{}, Invalid("delay_ms", "set only one of delay_ms or deliver_at")
	case delayMs != nil:
		if *delayMs > int64(time.Duration(1<<63-1)/time.Millisecond) {
			return When{}, Invalid("delay_ms", "too large: %d", *delayMs)
		}
		return When{Delay: time.Duration(*delayMs) * time.Millisecond}, nil
	case deliverAt != nil:
		if deliverAt.IsZero() {
			return When{}, Invalid("deliver_at", "must not be the zero time")
		}
		return When{DeliverAt: deliverAt.Time}, nil
	}
	return When{}, Invalid("delay_ms", "one of delay_ms or deliver_at is required")
}

func bytesField(plain, b64 *string, name string) ([]byte, error) {
	switch {
	case plain != nil && b64 != nil:
		return nil, Invalid(name, "set only one of %s or %s_base64", name, name)
	case plain != nil:
		return []byte(*plain), nil
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, Invalid(name+"_base64", "not standard base64: %v", err)
		}
		return b, nil
	}
	return nil, nil
}

func (s *Server) handleSchedule(w http.ResponseWriter, r *http.Request) {
	var body ScheduleBody
	if !s.decode(w, r, &body) {
		return
	}
	if strings.TrimSpace(body.Route) == "" {
		s.fail(w, r, Invalid("route", "is required"))
		return
	}
	when, err := parseWhen(body.DelayMs, body.DeliverAt)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	payload, err := bytesField(body.Payload, body.PayloadBase64, "payload")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if payload == nil {
		payload = []byte{}
	}
	key, err := bytesField(body.Key, body.KeyBase64, "key")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	res, err := s.opt.Backend.Schedule(ctx, ScheduleRequest{
		ID: body.ID, Route: body.Route, Key: key, RoutingKey: body.RoutingKey,
		Payload: payload, Headers: body.Headers, When: when, Replace: body.Replace,
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusCreated
	if res.Duplicate || res.Replaced {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/messages/"+url.PathEscape(res.ID))
	writeJSON(w, status, res)
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") == "" {
		writeError(w, http.StatusNotFound, "not found: no message id in the path", "")
		return
	}
	id := r.PathValue("id")
	ctx, cancel := s.call(r)
	defer cancel()
	prior, err := s.opt.Backend.Cancel(ctx, id)
	if errors.Is(err, ErrConflict) && prior != "" {
		// Already delivered or cancelled: say which, as a successful cancel would.
		writeJSON(w, http.StatusConflict, CancelConflict{Error: err.Error(), ID: id, PriorState: prior})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, CancelResult{ID: id, PriorState: prior})
}

func (s *Server) handleReschedule(w http.ResponseWriter, r *http.Request) {
	var body RescheduleBody
	if !s.decode(w, r, &body) {
		return
	}
	when, err := parseWhen(body.DelayMs, body.DeliverAt)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	res, err := s.opt.Backend.Reschedule(ctx, r.PathValue("id"), when)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.call(r)
	defer cancel()
	st, err := s.opt.Backend.Stats(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st.Shards == nil {
		st.Shards = []ShardStats{}
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opt.ReadyTimeout)
	defer cancel()
	if err := s.opt.Backend.Ready(ctx); err != nil {
		body := readyBody{Status: "not ready", Error: err.Error()}
		var nr *NotReadyError
		if errors.As(err, &nr) {
			body.Checks = nr.Checks
		}
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, readyBody{Status: "ready"})
}

// readyBody is the body of /readyz.
type readyBody struct {
	Status string  `json:"status"`
	Error  string  `json:"error,omitempty"`
	Checks []Check `json:"checks,omitempty"`
}

func (s *Server) handleRoutes(w http.ResponseWriter, r *http.Request) {
	rl, ok := s.opt.Backend.(RouteLister)
	if !ok {
		writeError(w, http.StatusNotFound, "this backend does not report routes", "")
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	out, err := rl.Routes(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- errors and JSON -------------------------------------------------------------

// StatusOf maps a Backend error to its HTTP status.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrNotImplemented):
		return http.StatusNotImplemented
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := StatusOf(err)
	field := ""
	var ie *InvalidError
	if errors.As(err, &ie) {
		field = ie.Field
	}
	if status >= 500 && status != http.StatusNotImplemented {
		s.log.Warn("admin API request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeError(w, status, err.Error(), field)
}

func writeError(w http.ResponseWriter, status int, msg, field string) {
	writeJSON(w, status, ErrorBody{Error: msg, Field: field})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
