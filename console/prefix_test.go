package console_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/console"
	"github.com/alkstore/alkstore/store"
)

// browserJar keeps cookies as a browser does: RFC 6265 §5.1.4 path-match
// against the request's path as written in its URL, escapes and their case
// included. (Go's cookiejar matches against the decoded path.)
type browserJar struct {
	mu      sync.Mutex
	cookies map[string]*http.Cookie // by name and path
}

func (j *browserJar) SetCookies(_ *url.URL, cks []*http.Cookie) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, ck := range cks {
		j.cookies[ck.Name+" "+ck.Path] = ck
	}
}

func (j *browserJar) Cookies(u *url.URL) []*http.Cookie {
	j.mu.Lock()
	defer j.mu.Unlock()
	path := u.EscapedPath()
	var out []*http.Cookie
	for _, ck := range j.cookies {
		p := ck.Path
		if path == p || strings.HasPrefix(path, p) && (strings.HasSuffix(p, "/") || path[len(p)] == '/') {
			out = append(out, &http.Cookie{Name: ck.Name, Value: ck.Value})
		}
	}
	return out
}

// TestActionsUnderAnEscapedPrefixKeepTheCSRFCookie: under a prefix that
// needs escaping, a browser following the console's own links and forms,
// or typing the console's URL with its escapes in either case, sends the
// CSRF cookie with every action, and each action returns to a page of the
// console. Before, links held the prefix as html/template escapes it
// ("/%c3%a4/queues/orders") while the cookie's Path was "/%C3%A4/": every
// form posted without the cookie (403 "missing or bad CSRF token"); and
// "/a#b" and "/q?x" were linked unescaped, to the page "/a" or "/q" (404).
func TestActionsUnderAnEscapedPrefixKeepTheCSRFCookie(t *testing.T) {
	lowerEscapes := regexp.MustCompile(`%[0-9A-F]{2}`)
	for _, prefix := range []string{"/ä", "/ops/ädmin", "/a#b", "/q?x", "/a;b", "/ops;v2/ä"} {
		t.Run(prefix, func(t *testing.T) {
			eachStore(t, console.Options{Prefix: prefix}, func(t *testing.T, s *server) {
				ctx := context.Background()
				_, err := s.st.Queue("orders").Enqueue(ctx, []byte("job"), store.EnqueueOpts{})
				require.NoError(t, err)
				escaped := (&url.URL{Path: prefix}).EscapedPath()
				typed := []string{escaped, lowerEscapes.ReplaceAllStringFunc(escaped, strings.ToLower)}
				jars := []struct {
					name string
					new  func() http.CookieJar
				}{
					{"browser", func() http.CookieJar { return &browserJar{cookies: map[string]*http.Cookie{}} }},
					{"cookiejar", func() http.CookieJar {
						j, err := cookiejar.New(nil)
						require.NoError(t, err)
						return j
					}},
				}
				for _, jar := range jars {
					jarName, newJar := jar.name, jar.new
					// One browser, typing one spelling, then the other.
					client := &http.Client{Jar: newJar(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
					setCookies := 0
					for _, entry := range typed {
						do := func(method, u string, form url.Values) (int, string, string) {
							req, err := http.NewRequest(method, u, strings.NewReader(form.Encode()))
							require.NoError(t, err)
							if method == http.MethodPost {
								req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
							}
							resp, err := client.Do(req)
							require.NoError(t, err)
							defer resp.Body.Close()
							setCookies += len(resp.Cookies())
							b, _ := io.ReadAll(resp.Body)
							return resp.StatusCode, resp.Header.Get("Location"), string(b)
						}
						where := jarName + " jar, typed " + entry
						// The overview, as typed; the queue's page by the
						// overview's link (once the sampler lists it).
						var overview string
						require.Eventually(t, func() bool {
							code, _, body := do(http.MethodGet, s.base+entry+"/", nil)
							overview = body
							return code == http.StatusOK && strings.Contains(body, ">orders</a>")
						}, 20*time.Second, 50*time.Millisecond, where)
						link := regexp.MustCompile(`href="([^"]*)">orders</a>`).FindStringSubmatch(overview)
						require.NotNil(t, link, where)
						code, _, page := do(http.MethodGet, s.base+html.UnescapeString(link[1]), nil)
						require.Equal(t, http.StatusOK, code, "%s: the overview's link %s", where, link[1])
						forms := regexp.MustCompile(`<form method="post" action="([^"]*)"[^>]*><input type="hidden" name="csrf" value="([^"]*)"><input type="hidden" name="back" value="([^"]*)">`).FindAllStringSubmatch(page, -1)
						require.NotEmpty(t, forms, where)
						paused := false
						for _, f := range forms {
							action := s.base + html.UnescapeString(f[1])
							u, err := url.Parse(action)
							require.NoError(t, err)
							assert.NotEmpty(t, client.Jar.Cookies(u), "%s: the form's action %s gets the CSRF cookie", where, f[1])
							if !strings.HasSuffix(action, "/queues/orders/pause") {
								continue
							}
							paused = true
							code, loc, body := do(http.MethodPost, action, url.Values{"csrf": {f[2]}, "back": {html.UnescapeString(f[3])}, "confirm": {"yes"}})
							require.Equal(t, http.StatusSeeOther, code, "%s: POST %s: %s", where, f[1], body)
							code, _, body = do(http.MethodGet, s.base+loc, nil)
							require.Equal(t, http.StatusOK, code, "%s: back to %s", where, loc)
							assert.Contains(t, body, `id="paused"`, "%s: back on the queue's page", where)
							// Resume by the same page's next form, so the next
							// round pauses again.
							resume := regexp.MustCompile(`<form method="post" action="([^"]*/resume)"[^>]*><input type="hidden" name="csrf" value="([^"]*)">`).FindStringSubmatch(body)
							require.NotNil(t, resume, where)
							code, _, body = do(http.MethodPost, s.base+html.UnescapeString(resume[1]), url.Values{"csrf": {resume[2]}, "confirm": {"yes"}})
							require.Equal(t, http.StatusSeeOther, code, "%s: POST %s: %s", where, resume[1], body)
						}
						assert.True(t, paused, "%s: the queue's page has a Pause form", where)
					}
					// A page fetched without the cookie sets a new one, and
					// the forms of every other open page fail.
					assert.Equal(t, 1, setCookies, "%s jar: one cookie, sent back with every request after the first", jarName)
				}
			})
		})
	}
}
