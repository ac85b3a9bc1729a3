package console_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/console"
	"github.com/alkstore/alkstore/store"
)

// The handler without a browser: what a page contains and how the live
// feed behaves, on both engines.

type server struct {
	st   *store.Store
	dsn  string
	base string
}

func eachStore(t *testing.T, opts console.Options, body func(t *testing.T, s *server)) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			dsn := freshDatabase(t, engine)
			if engine == "pg" {
				dsn = strings.Replace(dsn, "postgres://postgres@", "postgres://postgres:hunter2-secret@", 1) // a password the pages must never show
			}
			st, err := store.Open(context.Background(), dsn)
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			c := console.New(st, opts)
			srv := httptest.NewServer(c)
			t.Cleanup(srv.Close)
			t.Cleanup(func() { _ = c.Close() })
			body(t, &server{st: st, dsn: dsn, base: srv.URL})
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestPagesEscapeTruncateAndHideTheDSN: a hostile payload is escaped and
// cut in lists, shown whole up to 16 KiB on the job's page, and no page
// holds the DSN or its password.
func TestPagesEscapeTruncateAndHideTheDSN(t *testing.T) {
	eachStore(t, console.Options{}, func(t *testing.T, s *server) {
		ctx := context.Background()
		hostile := `<script>alert(1)</script>` + strings.Repeat("x", 40<<10)
		id, err := s.st.Queue("q").Enqueue(ctx, []byte(hostile), store.EnqueueOpts{})
		require.NoError(t, err)
		_, err = s.st.Stream("st").PublishWithKey(ctx, "<k>", []byte(hostile))
		require.NoError(t, err)
		for _, path := range []string{"/", "/queues/q", "/jobs/" + itoa(id), "/streams/st", "/schedules"} {
			code, body := get(t, s.base+path)
			require.Equal(t, http.StatusOK, code, path)
			assert.NotContains(t, body, "<script>alert", path)
			assert.NotContains(t, body, s.dsn, path)
			assert.NotContains(t, body, "hunter2", path)
			assert.Less(t, len(body), 40<<10, "%s: payload cut", path)
		}
		_, list := get(t, s.base+"/queues/q")
		assert.Contains(t, list, "&lt;script&gt;alert(1)&lt;/script&gt;xxx")
		assert.Contains(t, list, "(40985 bytes in all)")
		_, page := get(t, s.base+"/jobs/"+itoa(id))
		assert.Contains(t, page, strings.Repeat("x", 16<<10-30))
	})
}

// TestPagesSayNotFoundAndBadInput: an unknown job is 404, a bad state or
// id 400.
func TestPagesSayNotFoundAndBadInput(t *testing.T) {
	eachStore(t, console.Options{}, func(t *testing.T, s *server) {
		code, _ := get(t, s.base+"/jobs/424242")
		assert.Equal(t, http.StatusNotFound, code)
		code, _ = get(t, s.base+"/jobs/abc")
		assert.Equal(t, http.StatusBadRequest, code)
		code, _ = get(t, s.base+"/queues/q?state=bogus")
		assert.Equal(t, http.StatusBadRequest, code)
		code, _ = get(t, s.base+"/queues/__alk_x")
		assert.Equal(t, http.StatusBadRequest, code, "a reserved name")
		resp, err := http.Get(s.base + "/jobs?id=7")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, "/jobs/7", resp.Request.URL.Path, "the search box redirects to the job")
	})
}

// TestEventsPushAChangeAfterAWrite: the live feed sends a change event
// soon after a write, without the viewer asking.
func TestEventsPushAChangeAfterAWrite(t *testing.T) {
	eachStore(t, console.Options{SampleInterval: time.Hour}, func(t *testing.T, s *server) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		get(t, s.base+"/") // the first snapshot is in
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/events", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		lines := bufio.NewScanner(resp.Body)
		require.True(t, lines.Scan())
		assert.Equal(t, "retry: 2000", lines.Text(), "the stream is open")
		_, err = s.st.Queue("q").Enqueue(ctx, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		for lines.Scan() {
			if lines.Text() == "event: change" {
				return
			}
		}
		t.Fatalf("no change event after a write: %v", lines.Err())
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestOutboxShownByItsName: an outbox's queue is listed and titled by the
// outbox's own name, and its messages found by id, their attempt limit
// shown as the deliverer's (before, attack58's CLI finding seen in the
// console: "0 of 1073741824").
func TestOutboxShownByItsName(t *testing.T) {
	eachStore(t, console.Options{}, func(t *testing.T, s *server) {
		id, err := s.st.Outbox("webhooks").Enqueue(context.Background(), []byte("hook"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { // the overview's snapshot follows the write
			_, body := get(t, s.base+"/")
			return strings.Contains(body, ">outbox webhooks</a>")
		}, 10*time.Second, 20*time.Millisecond)
		code, body := get(t, s.base+"/queues/"+store.OutboxQueuePrefix+"webhooks")
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "<h1>Queue outbox webhooks")
		code, body = get(t, s.base+"/jobs/"+itoa(id))
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "hook")
		assert.NotContains(t, body, "/cancel", "an outbox's message has no cancel or delete")
		// Its limit is the deliverer's OutboxOpts.MaxAttempts, which the
		// database does not hold: not the 2^30 that stands for it.
		assert.Contains(t, body, "<dd>0 of -</dd>")
		assert.NotContains(t, body, "1073741824")
	})
}

// TestOverviewNamesWhatHoldsDelivery: on PostgreSQL a write transaction
// left open in another database holds the settled horizon, and the
// overview says so, naming its pid; once it ends the overview says
// delivery is current. SQLite's overview always says current.
func TestOverviewNamesWhatHoldsDelivery(t *testing.T) {
	eachStore(t, console.Options{SampleInterval: time.Hour}, func(t *testing.T, s *server) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st := s.st.Stream("orders")
		await := func(want string) {
			t.Helper()
			for {
				if _, body := get(t, s.base+"/"); strings.Contains(body, want) {
					return
				}
				select {
				case <-ctx.Done():
					t.Fatalf("the overview never said %q", want)
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		_, err := st.Publish(ctx, []byte("first"))
		require.NoError(t, err)
		await("Delivery is current")
		if s.st.Engine() != "pg" {
			return
		}
		other, err := pgServer.NewDatabase(ctx)
		require.NoError(t, err)
		conn, err := pgx.Connect(ctx, other)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		var pid int
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "CREATE TABLE app (x integer)") // takes a transaction id
		require.NoError(t, err)
		_, err = st.Publish(ctx, []byte("held"))
		require.NoError(t, err)
		await("held back by the write transaction of pid <strong>" + strconv.Itoa(pid) + "</strong>")
		require.NoError(t, tx.Rollback(ctx))
		_, err = st.Publish(ctx, []byte("after")) // a write: the console reads the store again
		require.NoError(t, err)
		await("Delivery is current")
	})
}

// TestStreamPageShowsItsGroups: a stream's page lists its consumer groups,
// each partition with its owner (or free), committed offset and lag.
func TestStreamPageShowsItsGroups(t *testing.T) {
	eachStore(t, console.Options{}, func(t *testing.T, s *server) {
		ctx := context.Background()
		_, err := s.st.Stream("st").PublishWithKey(ctx, "k", []byte("v"))
		require.NoError(t, err)
		m, err := s.st.Stream("st").Group("billing").Join(ctx, store.GroupOpts{Member: "worker", Partitions: 2})
		require.NoError(t, err)
		defer m.Close()
		_, err = m.Recv(ctx)
		require.NoError(t, err)
		_, err = s.st.Stream("other").Group("elsewhere").Join(ctx, store.GroupOpts{})
		require.NoError(t, err)
		code, body := get(t, s.base+"/streams/st")
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "Consumer group billing")
		assert.Contains(t, body, "2 partitions · 1 members · lag 1")
		assert.Contains(t, body, "<td>"+m.ID()+"</td>")
		assert.NotContains(t, body, "elsewhere", "another stream's group")
	})
}

// TestHeadsTableShowsAnEmptyValueAsAValue: a key whose current value is an
// empty payload is a live key (store.Head: "an empty, non-nil payload is a
// value"), shown as (empty) like the events table shows it; before session
// 59 the heads table said "tombstone" (a template if is false for an empty
// slice: attack59 F2). Stream.Heads leaves tombstones out, so a deleted key
// is not listed at all. key_after lists the heads without waiting for the
// sampler to count the keys.
func TestHeadsTableShowsAnEmptyValueAsAValue(t *testing.T) {
	eachStore(t, console.Options{}, func(t *testing.T, s *server) {
		ctx := context.Background()
		kv := s.st.Stream("kv")
		_, err := kv.PublishWithKey(ctx, "flag", []byte{})
		require.NoError(t, err)
		_, err = kv.PublishWithKey(ctx, "gone", []byte("v"))
		require.NoError(t, err)
		_, err = kv.PublishWithKey(ctx, "gone", nil)
		require.NoError(t, err)
		code, body := get(t, s.base+"/streams/kv?key_after=a")
		require.Equal(t, http.StatusOK, code)
		_, heads, ok := strings.Cut(body, `<table id="heads">`)
		require.True(t, ok, "the heads table is shown")
		heads, _, _ = strings.Cut(heads, "</table>")
		assert.Contains(t, heads, "<code>flag</code>")
		assert.Contains(t, heads, "<code>(empty)</code>", "an empty value reads as a value")
		assert.NotContains(t, heads, "tombstone", "a live key with an empty value is shown as deleted")
		assert.NotContains(t, heads, "<code>gone</code>", "a deleted key is left out")
	})
}
