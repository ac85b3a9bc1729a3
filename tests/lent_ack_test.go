package tests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestLentAckSettlesExactlyItsJobs: a worker's ack of its finished jobs
// settles exactly the jobs whose claims it still holds. On SQLite the
// worker lends that ack to its next claim, which runs it in its own write
// transaction after stamping its jobs (one commit for both); a lent claim
// that was lost fails that ack, and the claim then commits without it and
// the jobs are acked after, saying which claims were lost. Here the
// worker's first claim lapses while its handlers run; another store takes
// three of its jobs, and the worker's next claim takes the others again,
// in the transaction the lent ack runs in: the lapsed claim's token must
// settle none of them (neither the other store's nor the ones its own
// transaction just claimed), every run of a lapsed claim reports
// OutcomeClaimLost, the jobs taken again run again and are acked, and the
// other store's three stay running under its claim (it acks them after:
// its token still holds them). Another queue's jobs, claimed between the
// first claim's ids and the rest, stay running. The rest of the queue
// burns down through claims whose lent acks hold. With and without
// completed-job retention.
//
// Whether a round's acks are lent to a claim at all (on SQLite) depends on
// how the worker's ack loop and claims are scheduled; each round logs how
// many ack statements ran inside a claim's transaction. The store
// package's TestLentAckRunsInTheClaimsTransaction holds a claim until the
// ack is lent to it, both with the lent claim held and lapsed.
func TestLentAckSettlesExactlyItsJobs(t *testing.T) {
	eachEngineEachForm(t, []string{"keep=false", "keep=true"}, func(t *testing.T, e *engineEnv, form int) {
		for round := range 3 {
			lentAckRound(t, e, form == 1, round)
		}
	})
}

// lentAckRound runs one round of TestLentAckSettlesExactlyItsJobs and, on
// SQLite, logs how many ack statements ran inside a claim's transaction
// (after its stamp, before its COMMIT or ROLLBACK).
func lentAckRound(t *testing.T, e *engineEnv, keep bool, round int) {
	c := ctx(t)
	clk := newFakeClock()
	var mu sync.Mutex
	stamped, inClaim, aborted := false, 0, 0 // SQLite: a stamp not yet committed; ack statements after one; such transactions rolled back
	s := e.openHooked(t, func(name string) {
		mu.Lock()
		defer mu.Unlock()
		switch name {
		case "ClaimJob", "ClaimJobs", "ClaimJobsInRange":
			stamped = true
		case "AckJob", "CompleteJob", "AckJobsCounted", "CompleteJobsCounted",
			"AckJobsOfClaim", "AckJobsOfClaimInRange", "CompleteJobsOfClaim", "CompleteJobsOfClaimInRange":
			if stamped {
				inClaim++
			}
		case "COMMIT":
			stamped = false
		case "ROLLBACK":
			if stamped {
				aborted++
			}
			stamped = false
		}
	}, store.WithClock(clk.Now))
	other := e.open(t, store.WithClock(clk.Now))
	name := fmt.Sprintf("lent-%v-%d", keep, round)
	q, oq, side := s.Queue(name), other.Queue(name), other.Queue(name+"-side")
	if keep {
		require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
	}

	// 8 jobs (the first claim), 2 of the other queue, then 120 more.
	const batch, rest = 8, 120
	enqueue := func(q *store.Queue, n int) []int64 {
		ids := make([]int64, n)
		for i := range ids {
			var err error
			ids[i], err = q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
			require.NoError(t, err)
		}
		return ids
	}
	first := enqueue(q, batch)
	sideIDs := enqueue(side, 2)
	later := enqueue(q, rest)
	sideJobs, err := side.Claim(c, "other", 2, time.Hour)
	require.NoError(t, err)
	require.Len(t, sideJobs, 2)

	isFirst := map[int64]bool{}
	for _, id := range first {
		isFirst[id] = true
	}
	type report struct {
		attempt int
		res     store.JobResult
	}
	reports := map[int64][]report{}
	started := make(chan int64, batch)
	release := make(chan struct{})
	var reported sync.WaitGroup
	reported.Add(batch + (batch - 3) + rest) // the first claim's runs, its jobs taken again, the rest
	handler := func(_ context.Context, j *store.Job) error {
		attempt := j.Attempts
		j.OnResult(func(r store.JobResult) {
			mu.Lock()
			reports[j.ID] = append(reports[j.ID], report{attempt, r})
			mu.Unlock()
			reported.Done()
		})
		if isFirst[j.ID] && attempt == 1 {
			started <- j.ID
			<-release
		}
		return nil
	}
	wctx, stop := context.WithCancel(c)
	worked := make(chan error, 1)
	go func() {
		worked <- q.Work(wctx, store.WorkOpts{Concurrency: batch, Worker: "w", Visibility: time.Minute}, handler)
	}()
	defer func() {
		stop()
		require.NoError(t, <-worked)
	}()
	for range batch {
		select {
		case id := <-started:
			require.True(t, isFirst[id], "job %d ran first", id)
		case <-c.Done():
			t.Fatal("the first claim's handlers did not start")
		}
	}
	// The first claim lapses; the other store takes three of its jobs.
	clk.Advance(2 * time.Minute)
	taken, err := oq.Claim(c, "other", 3, time.Hour)
	require.NoError(t, err)
	require.Len(t, taken, 3)
	for i, j := range taken {
		require.Equal(t, first[i], j.ID, "the other store takes the lapsed jobs in claim order")
	}
	close(release)

	done := make(chan struct{})
	go func() { reported.Wait(); close(done) }()
	select {
	case <-done:
	case <-c.Done():
		t.Fatal("not every run was reported")
	}

	// Read what the hook and the reports hold, and let go of mu: the
	// worker's statements, still running, call the hook.
	mu.Lock()
	fused, rolledBack := inClaim, aborted
	got := maps.Clone(reports)
	mu.Unlock()
	for _, rs := range got { // a run's report may come after the next run's
		slices.SortFunc(rs, func(a, b report) int { return a.attempt - b.attempt })
	}
	for i, id := range first {
		rs := got[id]
		require.NotEmpty(t, rs, "job %d", id)
		assert.Equal(t, 1, rs[0].attempt, "job %d", id)
		assert.Equal(t, store.OutcomeClaimLost, rs[0].res.Outcome, "job %d's first run: its claim lapsed", id)
		if i < 3 {
			assert.Len(t, rs, 1, "job %d is the other store's", id)
			continue
		}
		if assert.Len(t, rs, 2, "job %d ran again", id) {
			assert.Equal(t, 2, rs[1].attempt, "job %d", id)
			assert.Equal(t, store.OutcomeAcked, rs[1].res.Outcome, "job %d's second run", id)
			assert.NoError(t, rs[1].res.SettleErr, "job %d", id)
		}
	}
	for _, id := range later {
		rs := got[id]
		if assert.Len(t, rs, 1, "job %d", id) {
			assert.Equal(t, store.OutcomeAcked, rs[0].res.Outcome, "job %d", id)
			assert.NoError(t, rs[0].res.SettleErr, "job %d", id)
		}
	}
	settled := func(id int64) {
		t.Helper()
		j, err := q.Job(c, id)
		if keep {
			if assert.NoError(t, err, "job %d is kept", id) {
				assert.Equal(t, store.JobCompleted, j.State, "job %d", id)
			}
			return
		}
		assert.True(t, errors.Is(err, store.ErrNotFound), "job %d is gone: %v", id, err)
	}
	for _, id := range first[3:] {
		settled(id)
	}
	for _, id := range later {
		settled(id)
	}
	// The other store's claims held throughout: its jobs are still running
	// under its token, which settles them.
	for _, j := range taken {
		job, err := q.Job(c, j.ID)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, job.State, "job %d is the other store's", j.ID)
		assert.Equal(t, "other", job.Worker, "job %d", j.ID)
	}
	n, err := oq.AckMany(c, taken)
	require.NoError(t, err)
	assert.EqualValues(t, 3, n, "the other store's claims still hold its jobs")
	for i, id := range sideIDs {
		job, err := side.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, job.State, "the other queue's job %d", id)
		assert.Equal(t, sideJobs[i].ID, id)
	}
	n, err = side.AckMany(c, sideJobs)
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "the other queue's claims still hold its jobs")
	if e.name == "lite" {
		t.Logf("round %d: %d ack statements inside a claim's transaction, %d such transactions rolled back", round, fused, rolledBack)
	}
}
