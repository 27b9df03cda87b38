package admin

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"unicode/utf8"
)

// Handlers of browsing, dead letters and bulk jobs (docs/CONTRACT.md §6).

// DefaultPayloadCap is how much of a payload GET /v1/messages/{id} shows by default.
const DefaultPayloadCap = 64 << 10

// render fills the wire fields of m from its raw key and payload; withPayload adds the
// payload (capped at limit bytes).
func render(m *Message, withPayload bool, limit int) {
	if len(m.RawKey) > 0 {
		if utf8.Valid(m.RawKey) {
			m.Key = string(m.RawKey)
		} else {
			m.KeyBase64 = base64.StdEncoding.EncodeToString(m.RawKey)
		}
	}
	if !withPayload || m.RawPayload == nil {
		return
	}
	p := m.RawPayload
	cut := len(p) > limit
	if cut {
		p = p[:limit]
	}
	if utf8.Valid(m.RawPayload) {
		for cut && len(p) > 0 && !utf8.Valid(p) { // do not split a rune
			p = p[:len(p)-1]
		}
		s := string(p)
		m.Payload = &s
	} else {
		s := base64.StdEncoding.EncodeToString(p)
		m.PayloadBase64 = &s
	}
	m.PayloadTruncated = cut
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") == "" {
		writeError(w, http.StatusNotFound, "not found: no message id in the path", "")
		return
	}
	if err := queryParams(r.URL.Query()); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	m, err := s.opt.Backend.Get(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	render(&m, true, s.opt.PayloadCap)
	writeJSON(w, http.StatusOK, m)
}

// browse answers GET /v1/messages and GET /v1/dead; dead forces the state.
func (s *Server) browse(w http.ResponseWriter, r *http.Request, dead bool) {
	q, err := parseQuery(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	switch {
	case dead && q.Filter.State != "" && q.Filter.State != StateDead:
		s.fail(w, r, Invalid("state", "the dead-letter list has only state dead, got %q", q.Filter.State))
		return
	case dead:
		q.Filter.State = StateDead
	case q.Filter.State == "":
		q.Filter.State = StatePending
	}
	ctx, cancel := s.call(r)
	defer cancel()
	page, err := s.opt.Backend.Browse(ctx, q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := MessageList{Messages: page.Messages, Count: len(page.Messages), NextCursor: page.NextCursor}
	if out.Messages == nil {
		out.Messages = []Message{}
	}
	for i := range out.Messages {
		render(&out.Messages[i], false, 0)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleBrowse(w http.ResponseWriter, r *http.Request)   { s.browse(w, r, false) }
func (s *Server) handleListDead(w http.ResponseWriter, r *http.Request) { s.browse(w, r, true) }

func (s *Server) handleRequeue(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.call(r)
	defer cancel()
	res, err := s.opt.Backend.RequeueDead(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handlePurge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := queryParams(q, "route"); err != nil {
		var ie *InvalidError
		if errors.As(err, &ie) {
			ie.Msg += "; purge by other filters with POST /v1/jobs, kind purge_dead"
		}
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	n, err := s.opt.Backend.PurgeDead(ctx, Filter{Route: q.Get("route"), State: StateDead})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, PurgeResult{Purged: n})
}

func (s *Server) handleCreateJob(w http.ResponseWriter, r *http.Request) {
	var body JobBody
	if !s.decode(w, r, &body) {
		return
	}
	spec, sample, err := body.Spec()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	if body.DryRun {
		p, err := s.opt.Backend.PreviewJob(ctx, spec, sample)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		p.DryRun, p.Spec = true, spec
		if p.Sample == nil {
			p.Sample = []Message{}
		}
		for i := range p.Sample {
			render(&p.Sample[i], false, 0)
		}
		writeJSON(w, http.StatusOK, p)
		return
	}
	job, err := s.opt.Backend.StartJob(ctx, spec)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+url.PathEscape(job.ID))
	writeJSON(w, http.StatusAccepted, job)
}

func (s *Server) handleGetJob(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.call(r)
	defer cancel()
	job, err := s.opt.Backend.GetJob(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, job)
}

func (s *Server) handleListJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := queryParams(q, "limit"); err != nil {
		s.fail(w, r, err)
		return
	}
	limit, err := parseLimit(q, DefaultJobList, MaxJobList)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	jobs, err := s.opt.Backend.ListJobs(ctx, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if jobs == nil {
		jobs = []Job{}
	}
	writeJSON(w, http.StatusOK, JobList{Jobs: jobs})
}
