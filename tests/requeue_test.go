package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// killJob claims the queue's next job and fails it, so it ends dead.
func killJob(t *testing.T, q *store.Queue, id int64) {
	t.Helper()
	c := ctx(t)
	jobs, err := q.Claim(c, "w", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, id, jobs[0].ID, "the job to kill is the next one")
	require.NoError(t, jobs[0].Fail(c, "boom"))
}

// killAll claims every job of the queue that is due and fails each, so
// they end dead (jobs with attempts left come back later, not now).
func killAll(t *testing.T, q *store.Queue) {
	t.Helper()
	c := ctx(t)
	for {
		jobs, err := q.Claim(c, "w", 500, time.Minute)
		require.NoError(t, err)
		if len(jobs) == 0 {
			return
		}
		for _, j := range jobs {
			require.NoError(t, j.Fail(c, "boom"))
		}
	}
}

// TestRequeueDeadMovesAJobHoldingItsOwnKey: a dead unique job whose ByState
// lists dead holds its own key; RequeueDead moves it back (before: the
// holder check found the job itself, RequeueDead returned 0 while Requeue
// of the same job worked).
func TestRequeueDeadMovesAJobHoldingItsOwnKey(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		q := e.open(t).Queue("import")
		kept := store.EnqueueOpts{Unique: store.UniqueOpts{Key: "import:42",
			ByState: []store.JobState{store.JobPending, store.JobRunning, store.JobDead}}}
		id, err := q.Enqueue(c, []byte("42"), kept)
		require.NoError(t, err)
		killJob(t, q, id)
		dup, err := q.EnqueueUnique(c, nil, kept)
		require.NoError(t, err)
		require.Equal(t, store.Enqueued{ID: id, Duplicate: true}, dup, "the dead job holds its key")

		moved, err := q.RequeueDead(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, moved)
		assert.Equal(t, store.JobPending, jobState(t, q, id))
		dup, err = q.EnqueueUnique(c, nil, kept)
		require.NoError(t, err)
		assert.Equal(t, store.Enqueued{ID: id, Duplicate: true}, dup, "requeued, it still holds its key")
	})
}

// TestRequeueDeadSkipsDeadJobsSharingAKey: two dead jobs with one unique key
// (the first freed it when it died, the key was enqueued again and that job
// died too) cannot both be pending. RequeueDead moves the one that died
// first and every other dead job of the batch, and leaves the second dead
// (before: the batch failed with "two dead jobs share a unique key" and
// moved nothing).
func TestRequeueDeadSkipsDeadJobsSharingAKey(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		c := ctx(t)
		q := e.open(t, store.WithClock(clk.Now)).Queue("mail")
		once := func(k string) store.EnqueueOpts { return store.EnqueueOpts{Unique: store.UniqueOpts{Key: k}} }
		var plain []int64
		enqueueAndKill := func(opts store.EnqueueOpts) int64 {
			id, err := q.Enqueue(c, nil, opts)
			require.NoError(t, err)
			killJob(t, q, id)
			clk.Advance(time.Second)
			return id
		}
		plain = append(plain, enqueueAndKill(store.EnqueueOpts{}))
		firstA := enqueueAndKill(once("a"))
		firstB := enqueueAndKill(once("b"))
		plain = append(plain, enqueueAndKill(store.EnqueueOpts{}))
		secondA := enqueueAndKill(once("a"))
		thirdA := enqueueAndKill(once("a"))
		secondB := enqueueAndKill(once("b"))
		plain = append(plain, enqueueAndKill(store.EnqueueOpts{}))

		moved, err := q.RequeueDead(c)
		require.NoError(t, err, "jobs that cannot move are skipped, not fatal")
		assert.EqualValues(t, 5, moved, "the plain jobs and the first of each key")
		for _, id := range append(plain, firstA, firstB) {
			assert.Equal(t, store.JobPending, jobState(t, q, id), "job %d", id)
		}
		for _, id := range []int64{secondA, thirdA, secondB} {
			assert.Equal(t, store.JobDead, jobState(t, q, id), "job %d: its key is held by the first again", id)
		}
		again, err := q.RequeueDead(c)
		require.NoError(t, err)
		assert.Zero(t, again, "the rest stay dead while the key is held")
	})
}

// TestRequeueDeadSkipsSharedKeysAcrossBatches: RequeueDead works in batches
// of 1,000; skipped jobs do not end it early. 1,500 dead jobs, each key
// twice, and 500 plain dead jobs after them: the first of each key and all
// plain jobs move.
func TestRequeueDeadSkipsSharedKeysAcrossBatches(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		c := ctx(t)
		q := e.open(t, store.WithClock(clk.Now)).Queue("bulk")
		const keys = 750
		for round := range 2 {
			batch := make([]store.NewJob, keys)
			for i := range batch {
				batch[i].Opts = store.EnqueueOpts{Unique: store.UniqueOpts{Key: fmt.Sprint("k", i)}}
			}
			if round == 1 {
				batch = append(batch, make([]store.NewJob, 500)...) // plain jobs
			}
			_, err := q.EnqueueMany(c, batch)
			require.NoError(t, err)
			killAll(t, q)
			clk.Advance(time.Second)
		}
		moved, err := q.RequeueDead(c)
		require.NoError(t, err)
		assert.EqualValues(t, keys+500, moved)
	})
}

// TestRequeueIntoAHeldKeyNamesTheHolder: Requeue of a job whose unique key
// another job holds fails with ErrInvalidArgument, naming the key's digest
// and the holder's id, as the README and the go doc say.
func TestRequeueIntoAHeldKeyNamesTheHolder(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		q := e.open(t).Queue("welcome")
		once := store.EnqueueOpts{Unique: store.UniqueOpts{Key: "welcome:ada"}}
		first, err := q.Enqueue(c, nil, once)
		require.NoError(t, err)
		killJob(t, q, first)
		holder, err := q.Enqueue(c, nil, once)
		require.NoError(t, err)
		require.NotEqual(t, first, holder)

		err = q.Requeue(c, first)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.ErrorContains(t, err, fmt.Sprintf("is held by job %d", holder))
		assert.Regexp(t, `unique key \(digest [0-9a-f]{64}\)`, err.Error())
		assert.Equal(t, store.JobDead, jobState(t, q, first))

		require.ErrorIs(t, q.Requeue(c, holder), store.ErrNotFound, "a pending job is not requeued")
		require.NoError(t, q.Cancel(c, holder))
		require.NoError(t, q.Requeue(c, first), "the key is free again")
		assert.Equal(t, store.JobPending, jobState(t, q, first))
	})
}
