package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/alkstore/alkstore/internal/joblimit"
	"github.com/alkstore/alkstore/store"
)

// Payloads are shown as text when they are UTF-8, cut to these many bytes.
const (
	listPayload = 120
	pagePayload = 16 << 10
)

var pages = []string{"overview", "queue", "job", "stream", "schedules", "confirm", "error"}

func parseTemplates(base string) map[string]*template.Template {
	funcs := template.FuncMap{
		"base":  func() string { return base },
		"path":  url.PathEscape,
		"query": url.QueryEscape,
		"ago":   ago,
		"agop": func(t *time.Time) string {
			if t == nil {
				return "-"
			}
			return ago(*t)
		},
		"dur":     short,
		"count":   count,
		"preview": func(p []byte) string { return preview(p, listPayload) },
		"full":    func(p []byte) string { return preview(p, pagePayload) },
		"text": func(s string) string {
			if s == "" {
				return "-"
			}
			return preview([]byte(s), listPayload)
		},
		"iso":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"outbox":   displayName,
		"mod4":     func(i int) int { return i % 4 },
		"isOutbox": func(queue string) bool { return strings.HasPrefix(queue, store.OutboxQueuePrefix) },
		"limit":    joblimit.Text,
		"button": func(p page, path, label, ask string) button {
			return button{Action: base + path, Label: label, Ask: ask, CSRF: p.CSRF, Back: p.Back}
		},
	}
	out := map[string]*template.Template{}
	for _, p := range pages {
		out[p] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html"))
	}
	return out
}

// page is what every template gets.
type page struct {
	Title    string
	Back     string // this page's URL, where an action returns to
	Nav      string
	CSRF     string
	ReadOnly bool
	Now      time.Time
	Data     any
}

// button is one action's form.
type button struct {
	Action, Label, Ask, CSRF, Back string
}

// render writes a page; with the X-Alkstore-Live header only its main
// part, which the live script swaps in.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, status int, p page) {
	p.CSRF = c.csrfToken(w, r)
	if r.Method == http.MethodGet {
		p.Back = c.baseURL + r.URL.RequestURI()
	}
	p.ReadOnly = c.opts.ReadOnly
	p.Now = time.Now()
	tmpl := c.tmpl[name]
	var buf bytes.Buffer
	exec := "layout.html"
	if r.Header.Get("X-Alkstore-Live") != "" {
		exec = "main"
	}
	if err := tmpl.ExecuteTemplate(&buf, exec, p); err != nil {
		c.log.Error("alkstore console: render", "page", name, "err", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an error page; not found and bad input get their status.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case isNotFound(err):
		status = http.StatusNotFound
	case isBadInput(err):
		status = http.StatusBadRequest
	default:
		c.log.Warn("alkstore console", "path", r.URL.Path, "err", err)
	}
	c.render(w, r, "error", status, page{Title: http.StatusText(status), Data: err.Error()})
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	if d > -time.Second && d < time.Second {
		return "now"
	}
	if d < 0 {
		return "in " + short(-d)
	}
	return short(d) + " ago"
}

func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

func count(n int64) string {
	if n >= store.StatsCountLimit {
		return fmt.Sprintf("%d+", n)
	}
	return fmt.Sprint(n)
}

// preview shows a payload as text cut to n bytes (on a rune boundary),
// or its size when it is not UTF-8. html/template escapes it.
func preview(p []byte, n int) string {
	switch {
	case p == nil:
		return "(none)"
	case len(p) == 0:
		return `(empty)`
	case !utf8.Valid(p):
		return fmt.Sprintf("(%d bytes of binary)", len(p))
	case len(p) <= n:
		return string(p)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return string(p[:cut]) + fmt.Sprintf("… (%d bytes in all)", len(p))
}

// displayName is a queue's name as people know it: an outbox's own name.
func displayName(name string) string {
	if ob, ok := strings.CutPrefix(name, store.OutboxQueuePrefix); ok {
		return "outbox " + ob
	}
	return name
}
