package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Unique jobs (issue 14 item 2): a key held by a live job makes a second
// enqueue a duplicate that adds nothing and returns the holder's id.

func uniq(key string) store.EnqueueOpts {
	return store.EnqueueOpts{Unique: store.UniqueOpts{Key: key}}
}

// jobCount counts a queue's pending, running and dead jobs.
func jobCount(t *testing.T, q *store.Queue) int64 {
	t.Helper()
	st, err := q.Stats(ctx(t))
	require.NoError(t, err)
	return st.Ready + st.Scheduled + st.Running + st.Dead
}

func TestUniqueJobDuplicates(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("mail")
		c := ctx(t)

		first, err := q.EnqueueUnique(c, []byte("welcome 42"), uniq("welcome:42"))
		require.NoError(t, err)
		assert.False(t, first.Duplicate)
		again, err := q.EnqueueUnique(c, []byte("welcome 42, again"), uniq("welcome:42"))
		require.NoError(t, err)
		assert.Equal(t, store.Enqueued{ID: first.ID, Duplicate: true}, again)
		// Enqueue is not an error either: it returns the holder's id.
		id, err := q.Enqueue(c, []byte("third"), uniq("welcome:42"))
		require.NoError(t, err)
		assert.Equal(t, first.ID, id)
		j, err := q.Job(c, first.ID)
		require.NoError(t, err)
		assert.Equal(t, "welcome 42", string(j.Payload), "a duplicate changes nothing")
		assert.EqualValues(t, 1, jobCount(t, q))

		// Another key, another queue, or no key at all: not duplicates.
		other, err := q.EnqueueUnique(c, nil, uniq("welcome:43"))
		require.NoError(t, err)
		assert.False(t, other.Duplicate)
		inOther, err := s.Queue("sms").EnqueueUnique(c, nil, uniq("welcome:42"))
		require.NoError(t, err)
		assert.False(t, inOther.Duplicate, "a key is unique within its queue")
		_, err = q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		assert.EqualValues(t, 3, jobCount(t, q))

		// EnqueueUnique needs a key; bad scopes are refused before any I/O.
		_, err = q.EnqueueUnique(c, nil, store.EnqueueOpts{})
		assert.ErrorIs(t, err, store.ErrInvalidArgument)
		for _, o := range []store.UniqueOpts{
			{Key: "k", ByState: []store.JobState{store.JobPending}},
			{Key: "k", ByState: []store.JobState{store.JobPending, store.JobRunning, "bogus"}},
			{Key: "k", ByPeriod: -time.Second},
			{ByPeriod: time.Hour},
		} {
			_, err = q.Enqueue(c, nil, store.EnqueueOpts{Unique: o})
			assert.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
		}
		_, err = q.Enqueue(c, nil, uniq("bad\x00key"))
		assert.ErrorIs(t, err, store.ErrInvalidName)
	})
}

// A job holds its key while it is pending or running (by default), and
// leaves it free once acked, cancelled or dead; the statements that move it
// (Ack, Cancel, Fail) know nothing of keys: the index's predicate reads the
// row's state.
func TestUniqueJobScopeFollowsState(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("mail")
		c := ctx(t)

		a, err := q.EnqueueUnique(c, nil, uniq("k"))
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		dup, err := q.EnqueueUnique(c, nil, uniq("k"))
		require.NoError(t, err)
		assert.Equal(t, store.Enqueued{ID: a.ID, Duplicate: true}, dup, "running holds the key")
		// Retried back to pending: still the holder.
		ok, err := jobs[0].Retry(c, time.Hour, "later")
		require.NoError(t, err)
		require.True(t, ok)
		dup, err = q.EnqueueUnique(c, nil, uniq("k"))
		require.NoError(t, err)
		assert.True(t, dup.Duplicate)
		// Cancelled: the key is free.
		require.NoError(t, q.Cancel(c, a.ID))
		b, err := q.EnqueueUnique(c, nil, uniq("k"))
		require.NoError(t, err)
		assert.False(t, b.Duplicate)
		assert.NotEqual(t, a.ID, b.ID)
		// Back into the key's scope while another job holds it: refused,
		// naming the holder (the README says so).
		err = q.Requeue(c, a.ID)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.ErrorContains(t, err, fmt.Sprintf("is held by job %d", b.ID))
		// Acked: free again.
		jobs, err = q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.NoError(t, jobs[0].Ack(c))
		d, err := q.EnqueueUnique(c, nil, uniq("k"))
		require.NoError(t, err)
		assert.False(t, d.Duplicate)

		// ByState with dead: a failed job keeps holding its key, until it
		// is requeued and acked.
		held := store.EnqueueOpts{Unique: store.UniqueOpts{Key: "once",
			ByState: []store.JobState{store.JobPending, store.JobRunning, store.JobDead, "cancelled"}}}
		f, err := q.EnqueueUnique(c, nil, held)
		require.NoError(t, err)
		require.NoError(t, q.Cancel(c, d.ID)) // out of the way of the claim below
		jobs, err = q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, f.ID, jobs[0].ID)
		require.NoError(t, jobs[0].Fail(c, "broken"))
		dup, err = q.EnqueueUnique(c, nil, held)
		require.NoError(t, err)
		assert.Equal(t, store.Enqueued{ID: f.ID, Duplicate: true}, dup, "dead holds a key that lists dead")
	})
}

func TestUniqueJobByPeriod(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock() // on the hour
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("digest")
		c := ctx(t)
		hourly := store.EnqueueOpts{Unique: store.UniqueOpts{Key: "digest", ByPeriod: time.Hour}}

		a, err := q.EnqueueUnique(c, nil, hourly)
		require.NoError(t, err)
		clk.Advance(59 * time.Minute)
		b, err := q.EnqueueUnique(c, nil, hourly)
		require.NoError(t, err)
		assert.Equal(t, store.Enqueued{ID: a.ID, Duplicate: true}, b, "same hour")
		clk.Advance(time.Minute)
		next, err := q.EnqueueUnique(c, nil, hourly)
		require.NoError(t, err)
		assert.False(t, next.Duplicate, "the next hour is another key, while the first job is still pending")
		plain, err := q.EnqueueUnique(c, nil, uniq("digest"))
		require.NoError(t, err)
		assert.False(t, plain.Duplicate, "a key without a period is another key")
		assert.EqualValues(t, 3, jobCount(t, q))
	})
}

func TestUniqueJobBatches(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("mail")
		c := ctx(t)

		held, err := q.EnqueueUnique(c, []byte("held"), uniq("c"))
		require.NoError(t, err)
		got, err := q.EnqueueManyUnique(c, []store.NewJob{
			{Payload: []byte("a1"), Opts: uniq("a")},
			{Payload: []byte("b"), Opts: uniq("b")},
			{Payload: []byte("a2"), Opts: uniq("a")},
			{Payload: []byte("c"), Opts: uniq("c")},
		})
		require.NoError(t, err)
		require.Len(t, got, 4)
		assert.False(t, got[0].Duplicate)
		assert.False(t, got[1].Duplicate)
		assert.Equal(t, store.Enqueued{ID: got[0].ID, Duplicate: true}, got[2], "a key repeated in the batch is added once")
		assert.Equal(t, store.Enqueued{ID: held.ID, Duplicate: true}, got[3])
		j, err := q.Job(c, got[0].ID)
		require.NoError(t, err)
		assert.Equal(t, "a1", string(j.Payload), "the first of the batch's jobs with a key is the one added")

		// EnqueueMany mixes unique and plain jobs; ids follow the input.
		ids, err := q.EnqueueMany(c, []store.NewJob{
			{Payload: []byte("p1")}, {Payload: []byte("b again"), Opts: uniq("b")},
			{Payload: []byte("p2")}, {Payload: []byte("d"), Opts: uniq("d")}, {Payload: []byte("p3")},
		})
		require.NoError(t, err)
		require.Len(t, ids, 5)
		assert.Equal(t, got[1].ID, ids[1])
		for i, want := range map[int]string{0: "p1", 2: "p2", 3: "d", 4: "p3"} {
			j, err := q.Job(c, ids[i])
			require.NoError(t, err)
			assert.Equal(t, want, string(j.Payload))
		}
		assert.EqualValues(t, 7, jobCount(t, q)) // held, a, b, p1, p2, d, p3

		_, err = q.EnqueueManyUnique(c, []store.NewJob{{Opts: uniq("x")}, {}})
		assert.ErrorIs(t, err, store.ErrInvalidArgument)
		none, err := q.EnqueueManyUnique(c, nil)
		require.NoError(t, err)
		assert.Empty(t, none)
	})
}

func TestUniqueJobInTransactions(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("mail")
		typed := s.JobQueue[struct{ User int }]("mail")
		c := ctx(t)

		// A key added in a rolled-back transaction was never held.
		tx, err := s.Begin(c)
		require.NoError(t, err)
		r, err := q.EnqueueUniqueTx(c, tx, nil, uniq("k"))
		require.NoError(t, err)
		assert.False(t, r.Duplicate)
		dup, err := typed.EnqueueUniqueTx(c, tx, struct{ User int }{42}, uniq("k"))
		require.NoError(t, err)
		assert.Equal(t, store.Enqueued{ID: r.ID, Duplicate: true}, dup, "the transaction sees its own holder")
		many, err := q.EnqueueManyUniqueTx(c, tx, []store.NewJob{{Opts: uniq("k")}, {Opts: uniq("m")}})
		require.NoError(t, err)
		assert.Equal(t, store.Enqueued{ID: r.ID, Duplicate: true}, many[0])
		assert.False(t, many[1].Duplicate)
		require.NoError(t, tx.Rollback(c))

		after, err := typed.EnqueueUnique(c, struct{ User int }{42}, uniq("k"))
		require.NoError(t, err)
		assert.False(t, after.Duplicate, "the rolled-back holder left the key free")
		id, err := typed.Enqueue(c, struct{ User int }{43}, uniq("k"))
		require.NoError(t, err)
		assert.Equal(t, after.ID, id)

		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			r, err := q.EnqueueUniqueTx(c, tx, nil, uniq("k"))
			require.NoError(t, err)
			assert.Equal(t, store.Enqueued{ID: after.ID, Duplicate: true}, r)
			ids, err := q.EnqueueManyTx(c, tx, []store.NewJob{{Opts: uniq("m")}, {Opts: uniq("m")}})
			require.NoError(t, err)
			assert.Equal(t, ids[0], ids[1])
			return nil
		}))
		assert.EqualValues(t, 2, jobCount(t, q))
	})
}

// Eight enqueuers released together by a barrier, many rounds, one key per
// round: exactly one job per key, and every enqueuer gets its id. On
// PostgreSQL they run on eight connections and meet in the unique index; on
// SQLite the writer slot orders them.
func TestUniqueJobConcurrentEnqueuers(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t, store.WithMaxConns(10))
		q := s.Queue("race")
		c := ctx(t)
		const rounds, workers = 25, 8
		for round := range rounds {
			key := fmt.Sprintf("key-%d", round)
			start := make(chan struct{})
			var ready, done sync.WaitGroup
			res := make([]store.Enqueued, workers)
			errs := make([]error, workers)
			for w := range workers {
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					ready.Done()
					<-start
					if w%2 == 0 {
						res[w], errs[w] = q.EnqueueUnique(c, []byte(key), uniq(key))
					} else { // half go through a batch
						var got []store.Enqueued
						got, errs[w] = q.EnqueueManyUnique(c, []store.NewJob{{Payload: []byte(key), Opts: uniq(key)}})
						if errs[w] == nil {
							res[w] = got[0]
						}
					}
				}()
			}
			ready.Wait()
			close(start)
			done.Wait()
			added := 0
			for w := range workers {
				require.NoError(t, errs[w], "round %d worker %d", round, w)
				assert.Equal(t, res[0].ID, res[w].ID, "round %d: every enqueuer gets the one job's id", round)
				if !res[w].Duplicate {
					added++
				}
			}
			assert.Equal(t, 1, added, "round %d: exactly one enqueuer added the job", round)
		}
		assert.EqualValues(t, rounds, jobCount(t, q))
	})
}

// Two transactions race for one key on PostgreSQL: the second waits in the
// unique index for the first to end, then is a duplicate if the first
// committed and adds its job if the first rolled back. (SQLite cannot show
// it: a write transaction holds the writer slot from Begin, so the second
// cannot start until the first ended; TestUniqueJobInTransactions covers
// what it sees then.)
func TestUniqueJobRacingTransactionsPostgres(t *testing.T) {
	e := newEnv(t, "pg")
	s := e.open(t)
	pool := e.pool(t)
	q := s.Queue("race")
	c := ctx(t)

	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			key := fmt.Sprintf("k-%v", commit)
			tx1, err := s.Begin(c)
			require.NoError(t, err)
			first, err := q.EnqueueUniqueTx(c, tx1, []byte("first"), uniq(key))
			require.NoError(t, err)
			require.False(t, first.Duplicate)

			type result struct {
				r   store.Enqueued
				err error
			}
			second := make(chan result, 1)
			go func() {
				tx2, err := s.Begin(c)
				if err != nil {
					second <- result{err: err}
					return
				}
				r, err := q.EnqueueUniqueTx(c, tx2, []byte("second"), uniq(key))
				if err == nil {
					err = tx2.Commit(c)
				} else {
					_ = tx2.Rollback(c)
				}
				second <- result{r, err}
			}()
			// The second transaction's insert is blocked on the first's row.
			require.Eventually(t, func() bool {
				var n int
				err := pool.QueryRow(c, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO alkstore.jobs%'`).Scan(&n)
				return err == nil && n == 1
			}, 30*time.Second, 5*time.Millisecond)
			select {
			case r := <-second:
				t.Fatalf("the second enqueue returned before the first transaction ended: %+v", r)
			default:
			}
			if commit {
				require.NoError(t, tx1.Commit(c))
			} else {
				require.NoError(t, tx1.Rollback(c))
			}
			r := <-second
			require.NoError(t, r.err)
			if commit {
				assert.Equal(t, store.Enqueued{ID: first.ID, Duplicate: true}, r.r)
			} else {
				assert.False(t, r.r.Duplicate, "a rolled-back holder lets the second insert")
				assert.NotEqual(t, first.ID, r.r.ID)
				j, err := q.Job(c, r.r.ID)
				require.NoError(t, err)
				assert.Equal(t, "second", string(j.Payload))
			}
		})
	}
	assert.EqualValues(t, 2, jobCount(t, q))
}

// TestRequeueDeadSkipsHeldKeys: RequeueDead moves every dead job back but
// those whose unique key another job holds now: one held key must not
// stop the others (before: the whole batch failed with a raw unique
// violation and moved nothing).
func TestRequeueDeadSkipsHeldKeys(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("requeue-unique")
		c := ctx(t)
		for _, k := range []string{"a", "b", "c"} {
			_, err := q.Enqueue(c, nil, store.EnqueueOpts{Unique: store.UniqueOpts{Key: k}})
			require.NoError(t, err)
		}
		_, err := q.Enqueue(c, nil, store.EnqueueOpts{}) // not unique
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 4, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 4)
		for _, j := range jobs {
			require.NoError(t, j.Fail(c, "boom"))
		}
		holder, err := q.EnqueueUnique(c, nil, store.EnqueueOpts{Unique: store.UniqueOpts{Key: "b"}, Delay: time.Hour})
		require.NoError(t, err)
		require.False(t, holder.Duplicate, "dead jobs leave their key by default")

		moved, err := q.RequeueDead(c)
		require.NoError(t, err)
		assert.Equal(t, int64(3), moved, "a, c and the plain job")
		dead, err := q.Jobs(c, store.JobsOpts{State: store.JobDead, Limit: 10})
		require.NoError(t, err)
		require.Len(t, dead, 1, "b stays dead: its key is held")
	})
}
