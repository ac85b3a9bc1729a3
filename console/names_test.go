package console_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/console"
	"github.com/alkstore/alkstore/store"
)

// TestNamesWithURLSyntaxReachTheirPages: a valid queue or stream name may
// hold a slash, a question mark, a percent sign: every link the overview
// gives reaches the page of the queue or stream it names, mounted at the
// root or under a prefix (where the prefix's removal lost the escapes, and
// "orders/eu" was looked up as /streams/orders/eu: 404, or 405 for a queue,
// routed to the POST action pattern).
func TestNamesWithURLSyntaxReachTheirPages(t *testing.T) {
	names := []string{"orders/eu", "q?x=1", "h#frag", "pct%2Fx", "sp ace", "é+ü"}
	for _, prefix := range []string{"", "/adm", "/ädmin"} {
		eachStore(t, console.Options{Prefix: prefix}, func(t *testing.T, s *server) {
			ctx := context.Background()
			// As links hold it: escaped, as the console escapes it.
			prefix := (&url.URL{Path: prefix}).EscapedPath()
			for _, n := range names {
				_, err := s.st.Stream(n).PublishWithKey(ctx, "k", []byte("event-of-"+n))
				require.NoError(t, err)
				_, err = s.st.Queue(n).Enqueue(ctx, []byte("job-of-"+n), store.EnqueueOpts{})
				require.NoError(t, err)
			}
			// The overview lists what the console's sampler last read: wait
			// until it lists every queue and stream.
			var overview string
			require.Eventually(t, func() bool {
				code, body := get(t, s.base+prefix+"/")
				overview = body
				return code == http.StatusOK && strings.Count(body, prefix+"/queues/")+strings.Count(body, prefix+"/streams/") >= 2*len(names)
			}, 20*time.Second, 50*time.Millisecond)
			links := map[string]string{} // link → page
			for _, m := range regexp.MustCompile(`href="([^"]+)"`).FindAllStringSubmatch(overview, -1) {
				u := html.UnescapeString(m[1])
				if _, seen := links[u]; seen || !strings.HasPrefix(u, prefix+"/") || strings.Contains(u, "/static/") {
					continue
				}
				code, page := get(t, s.base+u)
				assert.Equal(t, http.StatusOK, code, "link %s", u)
				links[u] = page
			}
			for _, n := range names {
				// The stream's page by its heading (its events show once
				// PostgreSQL's settled horizon passes them), the queue's by
				// its pending job.
				for _, marker := range []string{"<h1>Stream " + n + " ", "job-of-" + n} {
					found := false
					for _, page := range links {
						found = found || strings.Contains(html.UnescapeString(page), marker)
					}
					assert.True(t, found, "prefix %q: no linked page shows %q", prefix, marker)
				}
			}
		})
	}
}

// TestConfirmedActionsActOnTheNamedQueue: the confirmation page (the
// actions' form without JavaScript) posts to the escaped path. It posted to
// the decoded one: pausing queue "orders/eu" went to
// /queues/orders/eu/pause (404), and pausing queue "orders%2Feu" paused
// "orders/eu". Under a prefix that needs escaping too ("/ädmin": every page
// was 404 once the prefix was cut from the escaped path).
func TestConfirmedActionsActOnTheNamedQueue(t *testing.T) {
	for _, prefix := range []string{"", "/ädmin"} {
		eachStore(t, console.Options{Prefix: prefix}, func(t *testing.T, s *server) {
			ctx := context.Background()
			base := s.base + (&url.URL{Path: prefix}).EscapedPath()
			for _, n := range []string{"orders/eu", "orders%2Feu"} {
				_, err := s.st.Queue(n).Enqueue(ctx, []byte("job"), store.EnqueueOpts{})
				require.NoError(t, err)
			}
			// Cookies by hand, as a browser keeps them: Go's cookiejar
			// matches a cookie's path against the decoded path, browsers
			// against the escaped one the console sets.
			var cookies []*http.Cookie
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			do := func(method, path string, form url.Values) (int, string) {
				req, err := http.NewRequest(method, path, strings.NewReader(form.Encode()))
				require.NoError(t, err)
				if method == http.MethodPost {
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				for _, ck := range cookies {
					req.AddCookie(ck)
				}
				resp, err := client.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				for _, ck := range resp.Cookies() {
					assert.Equal(t, "/", ck.Path, "the cookie's path is a prefix of every escaping of the console's (TestActionsUnderAnEscapedPrefixKeepTheCSRFCookie)")
					cookies = append(cookies, ck)
				}
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			paused := func(name string) bool {
				qs, err := s.st.Queues(ctx)
				require.NoError(t, err)
				for _, q := range qs {
					if q.Name == name {
						return q.Paused
					}
				}
				return false
			}
			for _, n := range []string{"orders/eu", "orders%2Feu"} {
				page := base + "/queues/" + url.PathEscape(n)
				code, body := do(http.MethodGet, page, nil)
				require.Equal(t, http.StatusOK, code, page)
				tok := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
				require.NotNil(t, tok, page)
				code, confirm := do(http.MethodPost, page+"/pause", url.Values{"csrf": {tok[1]}})
				require.Equal(t, http.StatusOK, code, "the confirmation page of %s", n)
				action := regexp.MustCompile(`<form method="post" action="([^"]+)"`).FindStringSubmatch(confirm)
				require.NotNil(t, action, confirm)
				code, _ = do(http.MethodPost, s.base+html.UnescapeString(action[1]), url.Values{"csrf": {tok[1]}, "confirm": {"yes"}})
				assert.Equal(t, http.StatusSeeOther, code, "confirmed pause of %s at %s", n, action[1])
				assert.True(t, paused(n), "queue %q paused", n)
			}
			assert.True(t, paused("orders/eu") && paused("orders%2Feu"))
		})
	}
}

// TestResetRefusesAnUnknownStreamAndAnOffsetPastTheNewest: the console's
// reset refuses a stream of which nothing is stored (Stream.Exists: 404)
// and Stream.ResetOffset an offset past the newest of any event (400),
// and changes nothing; before session 59 both were stored (attack59 F1).
// A stream known by a consumer group alone is reset (review59b F1: 404).
func TestResetRefusesAnUnknownStreamAndAnOffsetPastTheNewest(t *testing.T) {
	eachStore(t, console.Options{}, func(t *testing.T, s *server) {
		ctx := context.Background()
		st := s.st.Stream("orders")
		head, err := st.Publish(ctx, []byte("x"))
		require.NoError(t, err)
		require.NoError(t, st.SaveOffset(ctx, "billing", head))
		var cookies []*http.Cookie
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		do := func(method, path string, form url.Values) (int, string) {
			req, err := http.NewRequest(method, s.base+path, strings.NewReader(form.Encode()))
			require.NoError(t, err)
			if method == http.MethodPost {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			for _, ck := range cookies {
				req.AddCookie(ck)
			}
			resp, err := client.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			cookies = append(cookies, resp.Cookies()...)
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		code, body := do(http.MethodGet, "/queues/q", nil) // a page with a form whatever the sampler saw
		require.Equal(t, http.StatusOK, code)
		tok := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
		require.NotNil(t, tok)
		reset := func(stream string, offset int64) (int, string) {
			return do(http.MethodPost, "/streams/"+stream+"/reset", url.Values{"csrf": {tok[1]}, "confirm": {"yes"},
				"consumer": {"billing"}, "offset": {fmt.Sprint(offset)}})
		}
		code, body = reset("orders-typo", 0)
		assert.Equal(t, http.StatusNotFound, code, body)
		code, body = reset("orders", head*10+100)
		assert.Equal(t, http.StatusBadRequest, code, body)
		assert.Contains(t, body, fmt.Sprintf("past %d", head))
		off, err := st.Offset(ctx, "billing")
		require.NoError(t, err)
		assert.Equal(t, head, off, "nothing changed")
		streams, err := s.st.Streams(ctx)
		require.NoError(t, err)
		assert.Len(t, streams, 1, "no consumer made for the mistyped stream")
		code, _ = reset("orders", 0)
		assert.Equal(t, http.StatusSeeOther, code, "a rewind still works")

		// A stream a consumer group consumes, trimmed empty: known by its
		// group alone (review59b F1: 404 before).
		gs := s.st.Stream("payments")
		var last int64
		for range 2 {
			last, err = gs.Publish(ctx, []byte("p"))
			require.NoError(t, err)
		}
		m, err := gs.Group("g").Join(ctx, store.GroupOpts{Partitions: 1})
		require.NoError(t, err)
		for range 2 {
			ev, err := m.Recv(ctx)
			require.NoError(t, err)
			require.NoError(t, m.Commit(ctx, ev))
		}
		require.NoError(t, m.Leave(ctx))
		_, err = gs.TrimTo(ctx, last)
		require.NoError(t, err)
		code, body = reset("payments", last)
		assert.Equal(t, http.StatusSeeOther, code, body)
	})
}

// TestActionsSendTheBrowserBackOnlyWithinTheConsole: an action's back (where
// the browser goes once it is done, and what the confirmation page carries
// on) is kept only when it is a path of the console's; any other goes to
// the console's first page. Before session 60 a back holding an ASCII
// control character passed: "/<TAB>/evil.com" was sent as the Location,
// which a browser follows to //evil.com, the WHATWG URL parser dropping
// tabs and newlines (attack60 F3).
func TestActionsSendTheBrowserBackOnlyWithinTheConsole(t *testing.T) {
	for _, prefix := range []string{"", "/admin"} {
		eachStore(t, console.Options{Prefix: prefix}, func(t *testing.T, s *server) {
			var cookies []*http.Cookie
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			do := func(method, path string, form url.Values) (int, string, string) {
				req, err := http.NewRequest(method, s.base+path, strings.NewReader(form.Encode()))
				require.NoError(t, err)
				if method == http.MethodPost {
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				for _, ck := range cookies {
					req.AddCookie(ck)
				}
				resp, err := client.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				cookies = append(cookies, resp.Cookies()...)
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header.Get("Location"), string(b)
			}
			code, _, body := do(http.MethodGet, prefix+"/queues/q", nil)
			require.Equal(t, http.StatusOK, code)
			tok := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
			require.NotNil(t, tok)
			hiddenBack := regexp.MustCompile(`<input type="hidden" name="back" value="([^"]*)">`)
			home := prefix + "/"
			for back, want := range map[string]string{
				prefix + "/queues/q":         prefix + "/queues/q",
				prefix + "/queues/a%20b?x=1": prefix + "/queues/a%20b?x=1",
				"/\t/evil.com":               home,
				"/\t\t/evil.com":             home,
				"/\n/evil.com":               home,
				"/\r/evil.com":               home,
				"/\x00/evil.com":             home,
				"/\x1f/evil.com":             home,
				"/\x7f/evil.com":             home,
				prefix + "/\t/evil.com":      home,
				prefix + "/queues/q\t":       home,
				"//evil.com":                 home,
				"/\\evil.com":                home,
				"https://evil.com/":          home,
				"evil.com":                   home,
				"":                           home,
			} {
				form := url.Values{"csrf": {tok[1]}, "back": {back}}
				code, _, confirm := do(http.MethodPost, prefix+"/queues/q/pause", form)
				require.Equal(t, http.StatusOK, code, "the confirmation page, back %q", back)
				carried := hiddenBack.FindStringSubmatch(confirm)
				require.NotNil(t, carried, confirm)
				assert.Equal(t, want, html.UnescapeString(carried[1]), "the confirmation page carries back %q on as", back)
				form.Set("confirm", "yes")
				code, location, _ := do(http.MethodPost, prefix+"/queues/q/pause", form)
				require.Equal(t, http.StatusSeeOther, code, "back %q", back)
				assert.Equal(t, want, location, "back %q", back)
			}
		})
	}
}
