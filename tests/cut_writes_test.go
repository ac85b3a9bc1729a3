package tests

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/progresslook"
	"github.com/alkstore/alkstore/store"
)

// endsAtProgressLook is a context cancelled at the at-th time SQLite's
// progress handler looks at it (ncruces asks Err there, every 1,000 VM
// steps of a statement and once more as a statement returns): a context
// that ends from inside a statement, at a point SQLite chooses, without
// timing. Looks from anywhere else (the driver's look before a step,
// database/sql) leave it alive.
type endsAtProgressLook struct {
	context.Context
	cancel context.CancelFunc
	at     int64
	looks  atomic.Int64
}

func (z *endsAtProgressLook) Err() error {
	if z.Context.Err() == nil && progresslook.FromProgressHandler() && z.looks.Add(1) == z.at {
		z.cancel()
	}
	return z.Context.Err()
}

// cutWrite is an auto-commit write of the store's, for
// TestAutoCommitWriteCutShortStoredItOrNothing: prep makes what one call
// needs (with the test's context) and returns the call and how much of it
// is stored (0: nothing; want: all of it).
type cutWrite struct {
	name string
	want int
	prep func(t *testing.T, round string) (call func(ctx context.Context) error, stored func() int)
}

// An auto-commit write whose context ends at any point either succeeds and
// stored its row (every row of a batch; a claim returns the jobs it took),
// or fails with an error matching the context's error; on SQLite a call
// that failed stored nothing, so a retry of it never doubles a job or an
// event. PostgreSQL cannot know whether a commit whose reply was cut off
// happened (README, "Engine differences"): there a failed call may have
// stored it, even after it returned (the server goes on with a statement
// whose client left). Each write runs with a context ended at each of its looks
// (Done and Err calls, searched over n: database/sql's or pgx's wait for a
// connection, the driver's look before a step, database/sql's watch of a
// query's rows), and on SQLite, many times, with one ended at the first
// look of SQLite's progress handler, which comes in the middle of a long
// statement or, once every thousand VM steps of a statement, as the
// statement returns, after its last instruction: for an auto-commit write,
// after its commit. Before: an interrupt there failed the call with
// "interrupted" although its row was stored (Enqueue, Publish, a keyed
// publish's COMMIT, an ack's...), and database/sql's close of a RETURNING
// write's rows when the context ended (AckMany, a unique job) reset the
// statement, which committed it, while the call failed with the context's
// error.
func TestAutoCommitWriteCutShortStoredItOrNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := heavyCtx(t) // bounded work, much of it: see heavyCtx
		db := e.sqlDB(t)
		jobs, events := "alkstore.jobs", "alkstore.events"
		if e.name == "lite" {
			jobs, events = "alk_jobs", "alk_events"
		}
		count := func(q string, arg any) int {
			var n int
			require.NoError(t, db.QueryRowContext(c, q, arg).Scan(&n))
			return n
		}
		jobsIn := func(queue string) func() int {
			return func() int { return count("SELECT count(*) FROM "+jobs+" WHERE queue = $1", queue) }
		}
		eventsIn := func(stream string) func() int {
			return func() int { return count("SELECT count(*) FROM "+events+" WHERE stream = $1", stream) }
		}
		// claimed enqueues n jobs on queue and claims them.
		claimed := func(t *testing.T, queue string, n int) []*store.Job {
			q := s.Queue(queue)
			for i := 0; i < n; i++ {
				_, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{MaxAttempts: 5})
				require.NoError(t, err)
			}
			js, err := q.Claim(c, "w", n, time.Minute)
			require.NoError(t, err)
			require.Len(t, js, n)
			return js
		}
		// inState counts the jobs of js in state.
		inState := func(queue string, js []*store.Job, state store.JobState) func() int {
			return func() int {
				n := 0
				for _, j := range js {
					got, err := s.Queue(queue).Job(c, j.ID)
					if errors.Is(err, store.ErrNotFound) {
						if state == store.JobCompleted {
							n++ // acked and deleted
						}
						continue
					}
					require.NoError(t, err)
					if got.State == state {
						n++
					}
				}
				return n
			}
		}
		many := func(n int, opts func(i int) store.EnqueueOpts) []store.NewJob {
			js := make([]store.NewJob, n)
			for i := range js {
				js[i] = store.NewJob{Payload: []byte(fmt.Sprint("p", i)), Opts: opts(i)}
			}
			return js
		}
		plain := func(int) store.EnqueueOpts { return store.EnqueueOpts{} }
		key := "k"
		writes := []cutWrite{
			{"Enqueue", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Queue(r).Enqueue(ctx, []byte("x"), store.EnqueueOpts{})
					return err
				}, jobsIn(r)
			}},
			{"Enqueue with options", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Queue(r).Enqueue(ctx, []byte("x"), store.EnqueueOpts{Priority: 3, Delay: time.Hour,
						MaxAttempts: 2, Headers: map[string]string{"h": "v"}})
					return err
				}, jobsIn(r)
			}},
			{"EnqueueUnique", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Queue(r).EnqueueUnique(ctx, []byte("x"), store.EnqueueOpts{Unique: store.UniqueOpts{Key: "u"}})
					return err
				}, jobsIn(r)
			}},
			{"EnqueueMany plain", 5, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Queue(r).EnqueueMany(ctx, many(5, plain))
					return err
				}, jobsIn(r)
			}},
			{"EnqueueMany alike", 5, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Queue(r).EnqueueMany(ctx, many(5, func(int) store.EnqueueOpts { return store.EnqueueOpts{Priority: 2} }))
					return err
				}, jobsIn(r)
			}},
			{"EnqueueMany mixed", 5, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Queue(r).EnqueueMany(ctx, many(5, func(i int) store.EnqueueOpts { return store.EnqueueOpts{Priority: i} }))
					return err
				}, jobsIn(r)
			}},
			{"EnqueueMany unique", 3, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Queue(r).EnqueueMany(ctx, many(3, func(i int) store.EnqueueOpts {
						return store.EnqueueOpts{Unique: store.UniqueOpts{Key: fmt.Sprint("u", i)}}
					}))
					return err
				}, jobsIn(r)
			}},
			{"Publish", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Stream(r).Publish(ctx, []byte("x"))
					return err
				}, eventsIn(r)
			}},
			{"PublishMessage", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Stream(r).PublishMessage(ctx, store.Message{Payload: []byte("x"), Headers: map[string]string{"h": "v"}})
					return err
				}, eventsIn(r)
			}},
			{"PublishWithKey", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Stream(r).PublishWithKey(ctx, "k", []byte("x"))
					return err
				}, eventsIn(r)
			}},
			{"PublishMany", 4, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				return func(ctx context.Context) error {
					_, err := s.Stream(r).PublishMany(ctx, []store.Message{{Payload: []byte("a")}, {Key: &key, Payload: []byte("b")},
						{Payload: []byte("c")}, {Payload: []byte("d")}})
					return err
				}, eventsIn(r)
			}},
			{"Ack", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				js := claimed(t, r, 1)
				return func(ctx context.Context) error { return js[0].Ack(ctx) }, inState(r, js, store.JobCompleted)
			}},
			{"AckMany", 3, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				js := claimed(t, r, 3)
				return func(ctx context.Context) error {
					n, err := s.Queue(r).AckMany(ctx, js)
					if err == nil && n != 3 {
						return fmt.Errorf("acked %d of 3", n)
					}
					return err
				}, inState(r, js, store.JobCompleted)
			}},
			{"AckMany with a lost claim", 2, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				// The third job's claim is taken over behind the process's
				// back (as by another worker after a lapse), so the batch
				// cannot ack all it holds in one statement (SQLite then
				// acks again, saying which).
				js := claimed(t, r, 3)
				_, err := db.ExecContext(c, "UPDATE "+jobs+" SET claim_token = claim_token + 1 WHERE id = $1", js[2].ID)
				require.NoError(t, err)
				return func(ctx context.Context) error {
					n, err := s.Queue(r).AckMany(ctx, js)
					if err == nil && n != 2 {
						return fmt.Errorf("acked %d of 2", n)
					}
					return err
				}, inState(r, js[:2], store.JobCompleted)
			}},
			{"Fail", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				js := claimed(t, r, 1)
				return func(ctx context.Context) error { return js[0].Fail(ctx, "no") }, inState(r, js, store.JobDead)
			}},
			{"Retry", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				js := claimed(t, r, 1)
				return func(ctx context.Context) error {
					_, err := js[0].Retry(ctx, time.Hour, "later")
					return err
				}, inState(r, js, store.JobPending)
			}},
			{"Claim", 2, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				q := s.Queue(r)
				var js []*store.Job
				for i := 0; i < 2; i++ {
					id, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{})
					require.NoError(t, err)
					js = append(js, &store.Job{ID: id})
				}
				running := inState(r, js, store.JobRunning)
				return func(ctx context.Context) error {
					got, err := q.Claim(ctx, "w", 2, time.Minute)
					if err == nil && len(got) != running() {
						return fmt.Errorf("the claim returned %d jobs, %d are running", len(got), running())
					}
					return err
				}, running
			}},
			{"Schedule Set", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				sc := s.Schedule(r)
				return func(ctx context.Context) error {
						return sc.Set(ctx, store.ScheduleSpec{Spec: "@hourly", Queue: "q"})
					}, func() int {
						_, err := sc.Info(c)
						if errors.Is(err, store.ErrNotFound) {
							return 0
						}
						require.NoError(t, err)
						return 1
					}
			}},
			{"SaveOffset", 1, func(t *testing.T, r string) (func(context.Context) error, func() int) {
				st := s.Stream(r)
				off, err := st.Publish(c, []byte("x"))
				require.NoError(t, err)
				return func(ctx context.Context) error { return st.SaveOffset(ctx, "c", off) }, func() int {
					got, err := st.Offset(c, "c")
					require.NoError(t, err)
					if got == off {
						return 1
					}
					return 0
				}
			}},
		}
		rounds := 0
		check := func(t *testing.T, w cutWrite, how string, z context.Context, cut func(parent context.Context) context.Context) (ended, wroteAnyway bool) {
			t.Helper()
			rounds++
			round := fmt.Sprintf("cut-%d", rounds)
			call, stored := w.prep(t, round)
			cctx := cut(z)
			err := call(cctx)
			got := stored()
			ended = z.Err() != nil
			if err == nil {
				require.Equal(t, w.want, got, "%s %s: the call succeeded, so all of it is stored", w.name, how)
				return ended, ended
			}
			require.ErrorIs(t, err, context.Canceled, "%s %s: a call cut short matches its context's error", w.name, how)
			if e.name == "lite" {
				require.Zero(t, got, "%s %s: the call failed (%v), so nothing of it is stored", w.name, how, err)
			}
			// PostgreSQL: the server may still be running the statement
			// that pgx gave up on, and commit it later; unknowable.
			return ended, false
		}
		for _, w := range writes {
			t.Run(w.name, func(t *testing.T) {
				// A context ended at each of its looks.
				for n := int64(1); ; n++ {
					inner, cancel := context.WithCancel(c)
					z := &cancelAtLook{cancelAtCall{Context: inner, cancel: cancel, n: n}}
					ended, _ := check(t, w, fmt.Sprintf("ended at look %d", n), inner, func(context.Context) context.Context { return z })
					cancel()
					if !ended {
						break // the call looked fewer than n times
					}
					require.Less(t, n, int64(200), "the call keeps looking at its ended context")
				}
				if e.name != "lite" {
					return
				}
				// Ended by SQLite's progress handler, from inside the
				// statement: the first look of a call's statements that
				// crosses a thousand VM steps (a crossing comes every few
				// calls; the counts go on from call to call).
				var cut, late int
				for i := 0; i < 300; i++ {
					inner, cancel := context.WithCancel(c)
					z := &endsAtProgressLook{Context: inner, cancel: cancel, at: 1}
					ended, wrote := check(t, w, "ended by a progress look", inner, func(context.Context) context.Context { return z })
					cancel()
					if ended {
						cut++
					}
					if wrote {
						late++
					}
				}
				assert.Positive(t, cut, "no progress look ended a call: the test shows nothing")
				t.Logf("%s: %d of 300 calls ended by a progress look, %d of them after their statements' work", w.name, cut, late)
			})
		}
	})
}
