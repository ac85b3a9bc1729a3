// Package console is alkstore's web console: an http.Handler showing one
// store's queues, streams, consumers, compacted keys and schedules, live,
// with the operator's actions (requeue, cancel, delete, pause and resume a
// queue, pause, resume and trigger a schedule, reset a consumer).
//
// Mount it in your own server behind your own authentication, like pprof:
//
//	c := console.New(st, console.Options{Prefix: "/alkstore"})
//	defer c.Close()
//	mux.Handle("/alkstore/", requireAdmin(c))
//
// The console has no authentication of its own: whoever reaches it can act
// (unless Options.ReadOnly). It protects every action from cross-site
// requests (a CSRF token and SameSite cookie), asks to confirm each, escapes
// and truncates payloads, and never shows the DSN. Pages work without
// JavaScript; with it they update live from server-sent events, which one
// goroutine feeds from the store's wake feed (Store.Changes) for every
// viewer. Assets are embedded: `go build` is the whole build.
package console

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/alkstore/alkstore/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a Console. Zero values take the defaults.
type Options struct {
	// Prefix is the path the console is mounted under ("/alkstore"),
	// without a trailing slash; "" for the root. Links start with it
	// (escaped: "/ä" as "/%C3%A4"), and the console strips it from request
	// paths itself, however they escape it.
	Prefix string
	// ReadOnly hides every action and refuses their POSTs (403).
	ReadOnly bool
	// SampleInterval is how often the charts take a sample (they show the
	// last hour); default 10s.
	SampleInterval time.Duration
	// Logger receives failed reads and actions; default slog.Default().
	Logger *slog.Logger
	// Clock stamps chart samples and places them on the hour; default
	// time.Now. Demos (make screenshots) speed it up.
	Clock func() time.Time
}

// Console is the web console's http.Handler. Close it when done.
type Console struct {
	st      *store.Store
	opts    Options
	base    string
	baseURL string // base escaped ("/ädmin": "/%C3%A4dmin"): every link, action and redirect starts with it
	secret  []byte
	tmpl    map[string]*template.Template
	mux     *http.ServeMux
	sampler *sampler
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New returns the console for st and starts its sampler (one goroutine
// reading the store on changes and every SampleInterval).
func New(st *store.Store, opts Options) *Console {
	if opts.SampleInterval <= 0 {
		opts.SampleInterval = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	c := &Console{st: st, opts: opts, base: strings.TrimRight(opts.Prefix, "/"), secret: newSecret(),
		log: opts.Logger, mux: http.NewServeMux()}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.baseURL = (&url.URL{Path: c.base}).EscapedPath()
	// Links start with the escaped base, not the decoded one: html/template
	// escapes "ä" in lower case ("/%c3%a4"), where a browser typing /ä/
	// sends "/%C3%A4", and leaves "#" and "?" as they are, so that "/a#b"
	// linked to the page "/a".
	c.tmpl = parseTemplates(c.baseURL)
	c.sampler = newSampler(st, opts.SampleInterval, opts.Clock)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.sampler.run(c.ctx)
	}()
	c.routes()
	return c
}

// Close stops the sampler and ends the live connections.
func (c *Console) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

func (c *Console) routes() {
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /{$}", c.overview)
	// A name is one escaped path segment (templates' path). Names ".",
	// ".." and "/" have no page: browsers and ServeMux resolve the dot
	// segments (escaped or not) and ServeMux answers "/queues/%2F" with
	// 404 (README, Web console).
	c.mux.HandleFunc("GET /queues/{name}", c.queuePage)
	c.mux.HandleFunc("GET /jobs/{id}", c.jobPage)
	c.mux.HandleFunc("GET /jobs", c.findJob)
	c.mux.HandleFunc("GET /streams/{name}", c.streamPage)
	c.mux.HandleFunc("GET /schedules", c.schedulesPage)
	c.mux.HandleFunc("GET /events", c.events)
	c.mux.HandleFunc("POST /queues/{name}/{action}", c.queueAction)
	c.mux.HandleFunc("POST /jobs/{id}/{action}", c.jobAction)
	c.mux.HandleFunc("POST /schedules/{name}/{action}", c.scheduleAction)
	c.mux.HandleFunc("POST /streams/{name}/reset", c.resetConsumer)
}

// ServeHTTP serves the console; request paths start with Options.Prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:")
	if c.base != "" {
		// The prefix comes off the escaped path, so that a name holding a
		// slash ("orders/eu", linked as orders%2Feu) stays one segment.
		// (The prefix escaped as the path is: "/ädmin" arrives as
		// "/%C3%A4dmin".)
		rest, ok := cutEscapedPrefix(r.URL.EscapedPath(), c.base)
		path, err := url.PathUnescape(rest)
		if !ok || err != nil {
			http.NotFound(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = cmpOr(path, "/")
		r2.URL.RawPath = cmpOr(rest, "/")
		r = r2
	}
	if r.Method == http.MethodPost {
		if c.opts.ReadOnly {
			http.Error(w, "this console is read-only", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !c.csrfOK(r) {
			http.Error(w, "missing or bad CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
	}
	c.mux.ServeHTTP(w, r)
}

// cutEscapedPrefix cuts from the escaped path esc the segments that decode
// to base, however they are escaped ("/%c3%a4dmin" or "/%C3%A4dmin" for
// "/ädmin"), and returns the rest still escaped.
func cutEscapedPrefix(esc, base string) (string, bool) {
	for i := 1; i <= len(esc); i++ {
		if i < len(esc) && esc[i] != '/' {
			continue
		}
		if p, err := url.PathUnescape(esc[:i]); err == nil && p == base {
			return esc[i:], true
		}
	}
	return "", false
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
