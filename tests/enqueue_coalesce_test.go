package tests

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestConcurrentEnqueuesKeepTheirOwnJobs: auto-commit Enqueues of one queue
// that arrive while another's statement is in flight (held open after it
// ran, in a statement hook) each get the id of their own job, stored with
// their own payload, priority, run time and headers; a job the application
// refuses (a trigger) fails its own call only. On PostgreSQL those calls
// share EnqueueJobs statements (store/coalesce.go), and the refused job
// makes the server reject its batch, which is then sent one job at a time;
// on SQLite each call runs alone, after the held one.
func TestConcurrentEnqueuesKeepTheirOwnJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const n = 24
		type gate struct {
			inHook, hold chan struct{}
			once         sync.Once
		}
		var held atomic.Pointer[gate] // while set, single-job statements' callers stop in the hook
		var batches, clockCalls atomic.Int64
		s := e.openHooked(t, func(name string) {
			switch name {
			case "EnqueueJob":
				if g := held.Load(); g != nil {
					g.once.Do(func() { close(g.inHook) })
					<-g.hold
				}
			case "EnqueueJobs":
				batches.Add(1)
			}
		}, store.WithClock(func() time.Time { clockCalls.Add(1); return time.Now() }))
		if e.name == "pg" {
			e.execSQL(t, `CREATE FUNCTION refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.payload = 'refused'::bytea THEN RAISE EXCEPTION 'refused by the application'; END IF; RETURN NEW; END $$`,
				`CREATE TRIGGER refuse_job BEFORE INSERT ON alkstore.jobs FOR EACH ROW EXECUTE FUNCTION refuse_job()`)
		} else {
			e.execSQL(t, `CREATE TRIGGER refuse_job BEFORE INSERT ON alk_jobs WHEN NEW.payload = CAST('refused' AS BLOB)
				BEGIN SELECT RAISE(ABORT, 'refused by the application'); END`)
		}
		q := s.Queue("coalesced")
		c := ctx(t)
		_, err := q.Enqueue(c, []byte("first"), store.EnqueueOpts{}) // registers the queue
		require.NoError(t, err)
		// A round with no refused job (on PostgreSQL the waiting calls share
		// statements), then one with the refused job among them.
		for round, refused := range []int{-1, 7} {
			before := time.Now()
			g := &gate{inHook: make(chan struct{}), hold: make(chan struct{})}
			held.Store(g)
			batches.Store(0)
			queueRound(t, e.name == "pg", q, g.inHook, g.hold, &clockCalls, n, refused, before)
			held.Store(nil)
			t.Logf("%s, round %d: %d jobs, %d EnqueueJobs statements", e.name, round, n, batches.Load())
			if e.name == "pg" && round == 0 {
				assert.Positive(t, batches.Load(), "the waiting calls shared no statement")
			}
		}
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, int64(1+(n+1)+n), st.Ready+st.Scheduled, "every job but the refused one")
	})
}

func queueRound(t *testing.T, pg bool, q *store.Queue, inHook, hold chan struct{}, clockCalls *atomic.Int64, n, refused int, before time.Time) {
	c := ctx(t)
	{
		lead := make(chan error, 1)
		go func() { _, err := q.Enqueue(c, []byte("lead"), store.EnqueueOpts{}); lead <- err }()
		<-inHook // the lead's statement ran; its call has not returned
		calls := clockCalls.Load()

		ids := make([]int64, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				payload := fmt.Appendf(nil, "job-%d", i)
				if i == refused {
					payload = []byte("refused")
				}
				ids[i], errs[i] = q.Enqueue(c, payload, store.EnqueueOpts{Priority: i, Delay: time.Duration(i) * time.Minute,
					Headers: map[string]string{"n": strconv.Itoa(i)}})
			}()
		}
		// Every call has read the clock, just before it joins the queue's
		// next statement. On PostgreSQL every call is then in the coalescer
		// (other tests' enqueues may be counted too, never fewer than
		// these): the lead's and the calls whose statements ran stopped in
		// the hook, the others waiting to share a statement. Then the held
		// calls return.
		require.Eventually(t, func() bool { return clockCalls.Load() >= calls+int64(n) }, 10*time.Second, time.Millisecond)
		if pg {
			require.Eventually(t, func() bool { return goroutinesIn("(*coalescer[...]).insert") >= n+1 }, 10*time.Second, time.Millisecond)
		}
		close(hold)
		require.NoError(t, <-lead)
		wg.Wait()
		after := time.Now()

		seen := map[int64]bool{}
		for i := range n {
			if i == refused {
				require.Error(t, errs[i])
				assert.Contains(t, errs[i].Error(), "refused by the application")
				assert.Contains(t, errs[i].Error(), `enqueue "coalesced"`)
				continue
			}
			require.NoError(t, errs[i], "job %d", i)
			require.False(t, seen[ids[i]], "job %d: id %d given twice", i, ids[i])
			seen[ids[i]] = true
			j, err := q.Job(c, ids[i])
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("job-%d", i), string(j.Payload), "job %d", i)
			assert.Equal(t, i, j.Priority, "job %d", i)
			assert.Equal(t, map[string]string{"n": strconv.Itoa(i)}, j.Headers, "job %d", i)
			delay := time.Duration(i) * time.Minute
			assert.False(t, j.RunAt.Before(before.Add(delay).Truncate(time.Microsecond)), "job %d runs at %v", i, j.RunAt)
			assert.False(t, j.RunAt.After(after.Add(delay)), "job %d runs at %v", i, j.RunAt)
			assert.False(t, j.CreatedAt.Before(before.Truncate(time.Microsecond)) || j.CreatedAt.After(after), "job %d created at %v", i, j.CreatedAt)
		}
	}
}

// goroutinesIn counts the goroutines whose stack holds a call of fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		k := runtime.Stack(buf, true)
		if k < len(buf) {
			return strings.Count(string(buf[:k]), fn+"(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestEnqueueManyMixesRunTimesAndExpiries: a batch whose first jobs run now
// and never expire, then one delayed and one expiring, stores each job's
// own run time and expiry (on PostgreSQL those arrays are sent only from
// the first job that needs them, filled in for the jobs before it).
func TestEnqueueManyMixesRunTimesAndExpiries(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		s := e.open(t, store.WithClock(func() time.Time { return now }))
		q := s.Queue("mixed")
		c := ctx(t)
		exp := now.Add(2 * time.Hour)
		ids, err := q.EnqueueMany(c, []store.NewJob{
			{Payload: []byte("a")},
			{Payload: []byte("b"), Opts: store.EnqueueOpts{Delay: time.Hour}},
			{Payload: []byte("c")},
			{Payload: []byte("d"), Opts: store.EnqueueOpts{ExpiresAt: exp}},
			{Payload: []byte("e")},
		})
		require.NoError(t, err)
		want := []struct {
			runAt   time.Time
			expires *time.Time
		}{{now, nil}, {now.Add(time.Hour), nil}, {now, nil}, {now, &exp}, {now, nil}}
		for i, id := range ids {
			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.True(t, j.RunAt.Equal(want[i].runAt), "job %d runs at %v", i, j.RunAt)
			if want[i].expires == nil {
				assert.Nil(t, j.ExpiresAt, "job %d", i)
			} else if assert.NotNil(t, j.ExpiresAt, "job %d", i) {
				assert.True(t, j.ExpiresAt.Equal(*want[i].expires), "job %d expires at %v", i, *j.ExpiresAt)
			}
		}
	})
}
