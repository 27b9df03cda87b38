package admin

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web console: static files under /ui/, embedded, no CDN, no build step. The page
// asks for the admin token once (kept in sessionStorage for the tab) and sends it as a
// bearer token on every /v1/ call; the files themselves hold no data and are served
// without a token.
//
//go:embed ui
var consoleFiles embed.FS

var consoleFS = func() http.Handler {
	sub, err := fs.Sub(consoleFiles, "ui")
	if err != nil {
		panic(err)
	}
	return http.StripPrefix("/ui/", http.FileServerFS(sub))
}()

func handleConsole(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	consoleFS.ServeHTTP(w, r)
}
