package console_test

import (
	"context"
	"html"
	"net/http"
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
	for _, prefix := range []string{"", "/adm"} {
		eachStore(t, console.Options{Prefix: prefix}, func(t *testing.T, s *server) {
			ctx := context.Background()
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
