package admin

import (
	"context"
	"net/http"
	"net/url"
)

// Ordering keys of routes with `order: key` (README "Order"): what is pending for one
// key, and cancelling it.

// KeyList is the body of GET and DELETE /v1/keys/{route}/{key}: the key's pending and
// in-flight messages in the key's order (due time, then receive order), without
// payloads, and Head, the id of the one that is claimable or being published ("" when
// none). For DELETE, the messages that were cancelled, each with the state it was in.
type KeyList struct {
	Route    string    `json:"route"`
	Key      string    `json:"key"`
	Head     string    `json:"head"`
	Messages []Message `json:"messages"`
}

// KeyBackend is implemented by backends that keep per-key order; without it the
// endpoints answer 501. An unknown route is ErrInvalid naming "route"; a route without
// `order: key` is ErrInvalid naming "route" too. A key with nothing pending is an
// empty list, not an error.
type KeyBackend interface {
	KeyMessages(ctx context.Context, route, key string) (KeyList, error)
	// CancelKey cancels what is pending or in flight for the key (in-flight: best
	// effort, as Cancel) and returns those messages with their prior state. A message
	// parked after the key was read is not cancelled.
	CancelKey(ctx context.Context, route, key string) (KeyList, error)
}

func (s *Server) handleKeys() {
	for _, method := range []string{"GET", "DELETE"} {
		s.handle(method+" /v1/keys/{route}/{key...}", func(w http.ResponseWriter, r *http.Request) {
			kb, ok := s.opt.Backend.(KeyBackend)
			if !ok {
				s.fail(w, r, notImplemented("per-key order"))
				return
			}
			if err := queryParams(r.URL.Query()); err != nil {
				s.fail(w, r, err)
				return
			}
			route, key := r.PathValue("route"), r.PathValue("key")
			if key == "" {
				s.fail(w, r, Invalid("key", "is required"))
				return
			}
			ctx, cancel := s.call(r)
			defer cancel()
			get := kb.KeyMessages
			if r.Method == http.MethodDelete {
				get = kb.CancelKey
			}
			list, err := get(ctx, route, key)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			for i := range list.Messages {
				render(&list.Messages[i], false, 0)
			}
			if list.Messages == nil {
				list.Messages = []Message{}
			}
			list.Route, list.Key = route, key
			writeJSON(w, http.StatusOK, list)
		})
	}
}

func keyPath(route, key string) string {
	return "/v1/keys/" + url.PathEscape(route) + "/" + url.PathEscape(key)
}

// KeyMessages lists what is pending for route's key (GET /v1/keys/{route}/{key}).
func (c *Client) KeyMessages(ctx context.Context, route, key string) (KeyList, error) {
	var out KeyList
	err := c.do(ctx, http.MethodGet, keyPath(route, key), nil, &out)
	return out, err
}

// CancelKey cancels what is pending for route's key (DELETE /v1/keys/{route}/{key}).
func (c *Client) CancelKey(ctx context.Context, route, key string) (KeyList, error) {
	var out KeyList
	err := c.do(ctx, http.MethodDelete, keyPath(route, key), nil, &out)
	return out, err
}
