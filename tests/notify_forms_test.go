package tests

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/store"
)

// TestWritesKeepEveryColumnWithOrWithoutTheirWake: on PostgreSQL an
// Enqueue, Publish or keyed publish the wake gate gives a wake runs the
// statement that carries its NOTIFY (EnqueueJobNotify, PublishEventNotify,
// PublishKeyedEventNotify), every other one the statement without it
// (EnqueueJob, PublishEvent, PublishKeyedEvent), and both write every
// column alike. The same writes run twice: with the gate's window at zero
// (every write carries its wake) and at an hour (only each topic's first
// one does, so the rest run the quiet forms): jobs plain, with headers,
// scheduled with a priority and a limit of attempts, expiring, unique;
// events unkeyed, with headers, keyed, keyed with headers. Each job and
// event read back has every column as its options say, and the same as its
// twin written by the other form. SQLite (one statement for both) runs the
// same writes and checks.
func TestWritesKeepEveryColumnWithOrWithoutTheirWake(t *testing.T) {
	eachEngineAlone(t, func(t *testing.T, e *engineEnv) { // alone: wake.SetGateWindow is per topic in the whole process, and other tests use these queue and stream names
		c := ctx(t)
		now := time.Date(2026, 12, 3, 19, 0, 0, 123456000, time.UTC)
		var mu sync.Mutex
		var ran []string
		s := e.openHooked(t, func(name string) {
			if strings.HasPrefix(name, "Enqueue") || strings.HasPrefix(name, "Publish") {
				mu.Lock()
				ran = append(ran, name)
				mu.Unlock()
			}
		}, store.WithClock(func() time.Time { return now }))
		took := func(do func()) []string {
			t.Helper()
			mu.Lock()
			ran = nil
			mu.Unlock()
			do()
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), ran...)
		}
		h := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k": `a"b`}
		key := "k1"
		opts := []store.EnqueueOpts{
			{},
			{},
			{Headers: h},
			{RunAt: now.Add(time.Hour), Priority: 5, MaxAttempts: 3},
			{ExpiresAt: now.Add(time.Hour)},
			{Unique: store.UniqueOpts{Key: "u"}},
		}
		msgs := []store.Message{{Payload: []byte("e")}, {Payload: []byte("e")}, {Payload: []byte("h"), Headers: h},
			{Key: &key, Payload: []byte("k")}, {Key: &key, Payload: []byte("kh"), Headers: h}}
		var jobs [2][]*store.Job
		var evs [2][]store.Event
		for i, window := range []time.Duration{0, time.Hour} {
			name := fmt.Sprintf("forms-%s-%d", e.name, i)
			if e.name == "pg" { // the windows are the process's: SQLite's subtest, beside, never restores them
				defer wake.SetGateWindow("q:"+name, window)()
				defer wake.SetGateWindow("s:"+name, window)()
			}
			q, st := s.Queue(name), s.Stream(name)
			_, err := q.Enqueue(c, nil, store.EnqueueOpts{}) // registers the queue; its topic's first wake
			require.NoError(t, err)
			_, err = st.Publish(c, nil) // the stream's first wake
			require.NoError(t, err)
			stmts := took(func() {
				for k, o := range opts {
					id, err := q.Enqueue(c, []byte(fmt.Sprintf("job %d", k)), o)
					require.NoError(t, err, "job %d", k)
					j, err := q.Job(c, id)
					require.NoError(t, err, "job %d", k)
					jobs[i] = append(jobs[i], j)
				}
				for k, m := range msgs {
					_, err := st.PublishMessage(c, m)
					require.NoError(t, err, "event %d", k)
				}
			})
			if e.name == "pg" {
				want := []string{"EnqueueJob", "EnqueueJob", "EnqueueJob", "EnqueueJob", "EnqueueJob", "EnqueueUniqueJob",
					"PublishEvent", "PublishEvent", "PublishEvent", "PublishKeyedEvent", "PublishKeyedEvent"}
				for k := range want {
					if window == 0 && want[k] != "EnqueueUniqueJob" { // every write carries its wake
						want[k] += "Notify"
					}
				}
				assert.Equal(t, want, stmts, "window %v", window)
			}
			got, err := st.ReadSince(c, 0, 100)
			require.NoError(t, err)
			require.Len(t, got, len(msgs)+1)
			evs[i] = got[1:]
		}
		for k, o := range opts {
			a, b := jobs[0][k], jobs[1][k]
			runAt := o.RunAt
			if runAt.IsZero() {
				runAt = now
			}
			assert.Equal(t, []byte(fmt.Sprintf("job %d", k)), a.Payload, "job %d", k)
			assert.Equal(t, o.Priority, a.Priority, "job %d", k)
			assert.Equal(t, store.JobPending, a.State, "job %d", k)
			assert.Zero(t, a.Attempts, "job %d", k)
			if o.MaxAttempts != 0 {
				assert.Equal(t, o.MaxAttempts, a.MaxAttempts, "job %d", k)
			}
			assert.Positive(t, a.MaxAttempts, "job %d", k)
			assert.True(t, a.CreatedAt.Equal(now), "job %d: created %v", k, a.CreatedAt)
			assert.True(t, a.RunAt.Equal(runAt), "job %d: run at %v, want %v", k, a.RunAt, runAt)
			if o.ExpiresAt.IsZero() {
				assert.Nil(t, a.ExpiresAt, "job %d", k)
			} else if assert.NotNil(t, a.ExpiresAt, "job %d", k) {
				assert.True(t, a.ExpiresAt.Equal(o.ExpiresAt), "job %d: expires %v", k, *a.ExpiresAt)
			}
			assert.Nil(t, a.ClaimedAt, "job %d", k)
			assert.Nil(t, a.ClaimExpiresAt, "job %d", k)
			assert.Nil(t, a.FinishedAt, "job %d", k)
			assert.Empty(t, a.Worker, "job %d", k)
			assert.Empty(t, a.LastError, "job %d", k)
			assert.Empty(t, a.Errors, "job %d", k)
			assert.Equal(t, o.Headers, a.Headers, "job %d", k)
			// The twin written by the other form: every column alike but
			// the id and the queue.
			a2, b2 := *a, *b
			a2.ID, b2.ID, a2.Queue, b2.Queue = 0, 0, "", ""
			assert.Equal(t, jobString(&a2), jobString(&b2), "job %d: the two forms", k)
		}
		for k, m := range msgs {
			a, b := evs[0][k], evs[1][k]
			assert.Equal(t, m.Payload, a.Payload, "event %d", k)
			assert.Equal(t, m.Key, a.Key, "event %d", k)
			assert.Equal(t, m.Headers, a.Headers, "event %d", k)
			assert.Equal(t, a.Payload, b.Payload, "event %d: the two forms", k)
			assert.Equal(t, a.Key, b.Key, "event %d: the two forms", k)
			assert.Equal(t, a.Headers, b.Headers, "event %d: the two forms", k)
		}
	})
}

// jobString is every column of j as text (time.Time by its instant).
func jobString(j *store.Job) string {
	tp := func(p *time.Time) string {
		if p == nil {
			return "nil"
		}
		return p.UTC().String()
	}
	return fmt.Sprintf("id=%d queue=%q payload=%q priority=%d state=%s attempts=%d max=%d created=%s run=%s claimed=%s claimexp=%s expires=%s worker=%q lasterr=%q errors=%v finished=%s headers=%v",
		j.ID, j.Queue, j.Payload, j.Priority, j.State, j.Attempts, j.MaxAttempts, j.CreatedAt.UTC(), j.RunAt.UTC(),
		tp(j.ClaimedAt), tp(j.ClaimExpiresAt), tp(j.ExpiresAt), j.Worker, j.LastError, j.Errors, tp(j.FinishedAt), j.Headers)
}
