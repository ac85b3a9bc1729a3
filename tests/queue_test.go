package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// fakeClock lets a test move time without sleeping.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	armed chan struct{} // closed by the next read (Arm)
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed != nil {
		close(c.armed)
		c.armed = nil
	}
	return c.t
}

// Arm returns a channel that the clock's next read closes.
func (c *fakeClock) Arm() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = make(chan struct{})
	return c.armed
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func ids(jobs []*store.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestClaimOrderAndDelays(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("emails")
		c := ctx(t)

		low, err := q.Enqueue(c, []byte("low"), store.EnqueueOpts{})
		require.NoError(t, err)
		clk.Advance(time.Second)
		low2, err := q.Enqueue(c, []byte("low2"), store.EnqueueOpts{})
		require.NoError(t, err)
		high, err := q.Enqueue(c, []byte("high"), store.EnqueueOpts{Priority: 10})
		require.NoError(t, err)
		later, err := q.Enqueue(c, []byte("later"), store.EnqueueOpts{Delay: time.Minute, Priority: 100})
		require.NoError(t, err)
		at, err := q.Enqueue(c, []byte("at"), store.EnqueueOpts{RunAt: clk.Now().Add(2 * time.Minute)})
		require.NoError(t, err)

		j, err := q.Job(c, low)
		require.NoError(t, err)
		assert.Nil(t, j.ClaimedAt, "ClaimedAt is nil before the first claim")
		assert.Equal(t, store.JobPending, j.State)
		assert.Equal(t, store.DefaultMaxAttempts, j.MaxAttempts)

		jobs, err := q.Claim(c, "w1", 10, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []int64{high, low, low2}, ids(jobs), "priority DESC, run_at, id; delayed jobs stay invisible")
		for _, j := range jobs {
			assert.Equal(t, store.JobRunning, j.State)
			assert.Equal(t, 1, j.Attempts)
			assert.Equal(t, "w1", j.Worker)
			require.NotNil(t, j.ClaimedAt)
			assert.True(t, j.ClaimedAt.Equal(clk.Now()))
			require.NotNil(t, j.ClaimExpiresAt)
			assert.True(t, j.ClaimExpiresAt.Equal(clk.Now().Add(time.Minute)))
		}
		require.NoError(t, jobs[0].Ack(c))
		_, err = q.Job(c, high)
		require.ErrorIs(t, err, store.ErrNotFound, "ack removes the job")

		clk.Advance(61 * time.Second) // "later" is due; the claims of low and low2 expired
		jobs, err = q.Claim(c, "w2", 10, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []int64{later, low, low2}, ids(jobs), "expired claims are claimable again, in the same order")
		assert.Equal(t, 2, jobs[1].Attempts)
		assert.True(t, jobs[1].ClaimedAt.Equal(clk.Now()), "a reclaim updates ClaimedAt")
		assert.Equal(t, "w2", jobs[1].Worker)

		clk.Advance(time.Minute)
		jobs, err = q.Claim(c, "w3", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		assert.Equal(t, later, jobs[0].ID, "n caps the claim; highest priority first")

		_, err = q.Claim(c, "w3", 0, time.Minute)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "a claim of nothing is refused (TestClaimRefusesACountBelowOne)")
		_ = at
	})
}

func TestExpiredJobsSweptToDead(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("reports")
		c := ctx(t)
		doomed, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Minute), Delay: 2 * time.Minute})
		require.NoError(t, err)
		kept, err := q.Enqueue(c, []byte("y"), store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Hour)})
		require.NoError(t, err)

		n, err := q.SweepExpired(c)
		require.NoError(t, err)
		assert.Zero(t, n)
		clk.Advance(2 * time.Minute)
		jobs, err := q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []int64{kept}, ids(jobs), "an expired job is never claimed")
		n, err = q.SweepExpired(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		j, err := q.Job(c, doomed)
		require.NoError(t, err)
		assert.Equal(t, store.JobExpired, j.State)
		assert.Equal(t, "expired", j.LastError)
		require.NotNil(t, j.FinishedAt)
	})
}

func TestConcurrentClaimersTakeEachJobOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("bulk")
		c := ctx(t)
		total := 10000
		if e.name == "lite" {
			// The writer slot serializes claims on SQLite, so the claimers
			// cannot race inside one claim; a thousand jobs still interleave
			// the 8 claimers over 27 claims, at a tenth of the cost (SQLite is
			// Go code, slowed ~40x by -race).
			total = 1000
		}
		batch := make([]store.NewJob, 1000)
		for i := 0; i < total; i += len(batch) {
			_, err := q.EnqueueMany(c, batch)
			require.NoError(t, err)
		}
		var (
			mu     sync.Mutex
			seen   = map[int64]int{}
			wg     sync.WaitGroup
			failed = make(chan error, 8)
		)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					jobs, err := q.Claim(c, fmt.Sprint("w", w), 37, time.Hour)
					if err != nil {
						failed <- err
						return
					}
					if len(jobs) == 0 {
						return
					}
					mu.Lock()
					for _, j := range jobs {
						seen[j.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(failed)
		for err := range failed {
			t.Fatal(err)
		}
		require.Len(t, seen, total, "every job claimed")
		for id, n := range seen {
			require.Equal(t, 1, n, "job %d claimed %d times", id, n)
		}
	})
}

func TestClaimFencing(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("fenced")
		c := ctx(t)
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		a, err := q.Claim(c, "A", 1, 30*time.Second)
		require.NoError(t, err)
		require.Len(t, a, 1)
		clk.Advance(31 * time.Second)

		// Expired but not yet reclaimed: A has already lost it.
		require.ErrorIs(t, a[0].Ack(c), store.ErrClaimLost)

		b, err := q.Claim(c, "B", 1, 30*time.Second)
		require.NoError(t, err)
		require.Len(t, b, 1)
		require.Equal(t, id, b[0].ID)

		require.ErrorIs(t, a[0].Ack(c), store.ErrClaimLost)
		_, err = a[0].Retry(c, 0, "A retries")
		require.ErrorIs(t, err, store.ErrClaimLost)
		require.ErrorIs(t, a[0].Fail(c, "A fails"), store.ErrClaimLost)
		require.ErrorIs(t, a[0].Heartbeat(c, time.Hour), store.ErrClaimLost)
		n, err := q.AckMany(c, a)
		require.NoError(t, err)
		assert.Zero(t, n)

		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, j.State, "A changed nothing")
		assert.Equal(t, "B", j.Worker)
		assert.Equal(t, 2, j.Attempts)
		assert.Empty(t, j.LastError)

		require.NoError(t, b[0].Heartbeat(c, time.Minute))
		clk.Advance(45 * time.Second) // past the first deadline, within the extended one
		require.NoError(t, b[0].Ack(c))
		require.ErrorIs(t, b[0].Ack(c), store.ErrInvalidArgument, "a settled job holds no claim")
	})
}

func TestRetryFailRequeueCancel(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("retry")
		c := ctx(t)
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 2})
		require.NoError(t, err)

		jobs, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		ok, err := jobs[0].Retry(c, 10*time.Second, "try again")
		require.NoError(t, err)
		assert.True(t, ok)
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
		assert.Equal(t, "try again", j.LastError)
		assert.True(t, j.RunAt.Equal(clk.Now().Add(10*time.Second)))

		none, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, none, "not before the retry delay")
		clk.Advance(10 * time.Second)
		jobs, err = q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		ok, err = jobs[0].Retry(c, time.Second, "out of attempts")
		require.NoError(t, err)
		assert.False(t, ok, "attempts exhausted: dead instead")
		j, err = q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, j.State)
		assert.Equal(t, "out of attempts", j.LastError)
		require.NotNil(t, j.FinishedAt)

		require.NoError(t, q.Requeue(c, id))
		j, err = q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
		assert.Zero(t, j.Attempts)
		require.ErrorIs(t, q.Requeue(c, id), store.ErrNotFound, "only dead jobs requeue")

		jobs, err = q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.NoError(t, jobs[0].Fail(c, "broken for good"))
		j, err = q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, j.State)
		assert.Equal(t, "broken for good", j.LastError)

		other, err := q.Enqueue(c, []byte("y"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, q.Cancel(c, other))
		j, err = q.Job(c, other)
		require.NoError(t, err)
		assert.Equal(t, store.JobCancelled, j.State)
		require.NotNil(t, j.FinishedAt)
		require.ErrorIs(t, q.Cancel(c, other), store.ErrNotFound)
		_, err = q.Job(c, 999999)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.Queue("elsewhere").Job(c, other)
		require.ErrorIs(t, err, store.ErrNotFound, "a job belongs to its queue")
	})
}

func TestSpentClaimThatExpiresGoesDead(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("once")
		c := ctx(t)
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "crashy", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		clk.Advance(2 * time.Minute) // the worker died holding its only attempt

		again, err := q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, again, "an exhausted job does not run again")
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, j.State)
		assert.Contains(t, j.LastError, "attempts exhausted")
	})
}

func TestAckManyOnlyAcksHeldClaims(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("batch")
		c := ctx(t)
		for i := 0; i < 3; i++ {
			_, err := q.Enqueue(c, []byte{byte(i)}, store.EnqueueOpts{Priority: 3 - i})
			require.NoError(t, err)
		}
		first, err := q.Claim(c, "A", 1, 10*time.Second)
		require.NoError(t, err)
		clk.Advance(5 * time.Second)
		rest, err := q.Claim(c, "A", 2, time.Minute)
		require.NoError(t, err)
		clk.Advance(6 * time.Second) // first's claim expired
		stolen, err := q.Claim(c, "B", 1, time.Minute)
		require.NoError(t, err)
		require.Equal(t, first[0].ID, stolen[0].ID)

		n, err := q.AckMany(c, append(first, rest...))
		require.NoError(t, err)
		assert.EqualValues(t, 2, n, "only the rows still held by their claims")
		j, err := q.Job(c, first[0].ID)
		require.NoError(t, err)
		assert.Equal(t, "B", j.Worker, "B's claim survived A's batch")
		n, err = q.AckMany(c, []*store.Job{{ID: 1}, nil})
		require.NoError(t, err, "entries holding no claim are skipped, not fatal")
		assert.Zero(t, n)
	})
}

// TestAckManyOfTwoRunsOfOneJob: a job whose first claim lapsed and that
// was claimed again has two runs; an AckMany holding both, in either
// order, acks it once, by the later claim (SQLite reads the claims as one
// JSON object whose member names are the ids: both members of one name
// are read, whichever comes first).
func TestAckManyOfTwoRunsOfOneJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		for _, laterFirst := range []bool{false, true} {
			q := s.Queue(fmt.Sprintf("twice-%v", laterFirst))
			id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
			require.NoError(t, err)
			_, err = q.Enqueue(c, []byte("other"), store.EnqueueOpts{Priority: -1})
			require.NoError(t, err)
			older, err := q.Claim(c, "A", 1, 10*time.Second)
			require.NoError(t, err)
			require.Len(t, older, 1)
			clk.Advance(11 * time.Second) // the first claim lapsed
			later, err := q.Claim(c, "A", 1, time.Minute)
			require.NoError(t, err)
			require.Len(t, later, 1)
			require.Equal(t, id, later[0].ID)
			batch := []*store.Job{older[0], later[0]}
			if laterFirst {
				batch = []*store.Job{later[0], older[0]}
			}
			n, err := q.AckMany(c, batch)
			require.NoError(t, err)
			assert.EqualValues(t, 1, n, "later first: %v", laterFirst)
			_, err = q.Job(c, id)
			assert.ErrorIs(t, err, store.ErrNotFound, "later first: %v: acked by the later claim", laterFirst)
		}
	})
}

func TestEnqueueFollowsItsTransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("txjobs")
		c := ctx(t)
		var rolledBack int64
		err := s.InTx(c, func(c context.Context, tx store.Tx) error {
			id, err := q.EnqueueTx(c, tx, []byte("ghost"), store.EnqueueOpts{})
			require.NoError(t, err)
			rolledBack = id
			j, err := q.JobTx(c, tx, id)
			require.NoError(t, err, "the tx sees its own job")
			assert.Equal(t, []byte("ghost"), j.Payload)
			_, err = q.Job(c, id)
			require.ErrorIs(t, err, store.ErrNotFound, "nobody else does")
			return errors.New("roll back")
		})
		require.Error(t, err)
		_, err = q.Job(c, rolledBack)
		require.ErrorIs(t, err, store.ErrNotFound)
		none, err := q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, none, "a rolled-back enqueue leaves no job")

		var committed []int64
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			id, err := q.EnqueueTx(c, tx, []byte("real"), store.EnqueueOpts{})
			if err != nil {
				return err
			}
			more, err := q.EnqueueManyTx(c, tx, []store.NewJob{{Payload: []byte("m")}})
			committed = append([]int64{id}, more...)
			return err
		}))
		jobs, err := q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		assert.ElementsMatch(t, committed, ids(jobs))
	})
}

func TestQueueValidation(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		_, err := s.Queue("__alk_outbox:x").Enqueue(c, nil, store.EnqueueOpts{})
		require.ErrorIs(t, err, store.ErrReservedName)
		_, err = s.Queue("").Claim(c, "w", 1, time.Second)
		require.ErrorIs(t, err, store.ErrInvalidName)
		q := s.Queue("valid")
		_, err = q.Claim(c, "", 1, time.Second)
		require.ErrorIs(t, err, store.ErrInvalidName)
		_, err = q.Claim(c, "w", 1, 0)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		for _, o := range []store.EnqueueOpts{{MaxAttempts: -1}, {Delay: -time.Second}, {Delay: time.Second, RunAt: time.Now()}} {
			_, err = q.Enqueue(c, nil, o)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
		}
		_, err = q.EnqueueMany(c, []store.NewJob{{}, {Opts: store.EnqueueOpts{MaxAttempts: -2}}})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, store.QueueStats{}, st, "rejected calls stored nothing")
		require.ErrorIs(t, q.Work(c, store.WorkOpts{Timeout: time.Minute, Visibility: time.Second}, nil), store.ErrInvalidArgument)
	})
}

func TestQueueStats(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("stats")
		c := ctx(t)
		for i := 0; i < 3; i++ {
			_, err := q.Enqueue(c, nil, store.EnqueueOpts{})
			require.NoError(t, err)
		}
		_, err := q.Enqueue(c, nil, store.EnqueueOpts{Delay: time.Hour})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.NoError(t, jobs[0].Fail(c, "x"))
		_, err = q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		clk.Advance(90 * time.Second)
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, store.QueueStats{Ready: 1, Scheduled: 1, Running: 1, Dead: 1, OldestReady: 90 * time.Second}, st)
	})
}

// TestClaimedJobIsTheStoredJob: a claimed job carries what the store holds
// for it once claimed, field by field. SQLite's claim returns only the
// columns it did not stamp and fills in the rest (the queue, state, claim
// times, worker); this keeps the two from drifting apart, on a job with
// every optional field set and an attempt's error behind it.
func TestClaimedJobIsTheStoredJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		q := s.Queue("emails")
		c := ctx(t)
		id, err := q.Enqueue(c, []byte("payload"), store.EnqueueOpts{Priority: 3, MaxAttempts: 5,
			ExpiresAt: clk.Now().Add(time.Hour), Headers: map[string]string{"trace": "abc"}})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w1", 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		retried, err := jobs[0].Retry(c, 0, "boom")
		require.NoError(t, err)
		require.True(t, retried)
		clk.Advance(time.Second)

		jobs, err = q.Claim(c, "w2", 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		stored, err := q.Job(c, id)
		require.NoError(t, err)
		exported := func(j *store.Job) store.Job {
			return store.Job{ID: j.ID, Queue: j.Queue, Payload: j.Payload, Priority: j.Priority, State: j.State,
				Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, CreatedAt: j.CreatedAt, RunAt: j.RunAt,
				ClaimedAt: j.ClaimedAt, ClaimExpiresAt: j.ClaimExpiresAt, ExpiresAt: j.ExpiresAt, Worker: j.Worker,
				LastError: j.LastError, Errors: j.Errors, FinishedAt: j.FinishedAt, Headers: j.Headers}
		}
		assert.Equal(t, exported(stored), exported(jobs[0]))
		assert.Equal(t, 2, jobs[0].Attempts)
		assert.Equal(t, "boom", jobs[0].LastError)
		assert.Len(t, jobs[0].Errors, 1)
		require.NoError(t, jobs[0].Ack(c), "the claimed job holds its claim's token")
	})
}
