package tests

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestWorkClaimsJobsThatLandBeforeItsPosition: Work's claims move down
// the queue, and the entries of the jobs they settled stay at the head of
// PostgreSQL's ready index until VACUUM (every claim walks them: issue
// 18). A claim that started past them, at the worker's last position,
// would save that walk but miss a job another transaction puts before
// that position once the claims moved on: one of higher priority, one due
// earlier (a RunAt in the past), and a released job, which keeps its old
// place in line. Each must still be claimed before the jobs behind the
// position (priority, then run_at, then id). One handler at a time, so
// jobs run in claim order; the 20th holds its slot (no claim can be in
// flight) while the three are written, and the last plain job, last in
// line, ends the run.
func TestWorkClaimsJobsThatLandBeforeItsPosition(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("order")
		c := ctx(t)

		// released: claimed by another worker before the rest are enqueued,
		// so its place is ahead of all of them; given back mid-run.
		_, err := q.Enqueue(c, []byte("released"), store.EnqueueOpts{})
		require.NoError(t, err)
		held, err := q.Claim(c, "other", 1, time.Hour)
		require.NoError(t, err)
		require.Len(t, held, 1)
		released := held[0].ID

		const n, hold = 40, 20
		batch := make([]store.NewJob, n)
		plain, err := q.EnqueueMany(c, batch)
		require.NoError(t, err)
		require.Len(t, plain, n)

		var mu sync.Mutex
		var order []int64
		reached, resume, last := make(chan struct{}), make(chan struct{}), make(chan struct{})
		wctx, stop := context.WithCancel(c)
		done := make(chan error, 1)
		go func() {
			done <- q.Work(wctx, store.WorkOpts{Concurrency: 1, Batch: 1, Grace: time.Second}, func(hc context.Context, j *store.Job) error {
				mu.Lock()
				order = append(order, j.ID)
				mu.Unlock()
				switch j.ID {
				case plain[hold-1]:
					close(reached)
					select {
					case <-resume:
					case <-hc.Done():
					}
				case plain[n-1]:
					close(last)
				}
				return nil
			})
		}()
		select {
		case <-reached:
		case <-time.After(30 * time.Second):
			t.Fatal("Work did not reach the held job")
		}
		high, err := q.Enqueue(c, []byte("high"), store.EnqueueOpts{Priority: 5})
		require.NoError(t, err)
		early, err := q.Enqueue(c, []byte("early"), store.EnqueueOpts{RunAt: time.Now().Add(-time.Hour)})
		require.NoError(t, err)
		require.NoError(t, held[0].Release(c))
		close(resume)

		// The last plain job is the last in line: every other job ran before it.
		select {
		case <-last:
		case <-time.After(30 * time.Second):
			t.Fatal("Work did not reach the last job")
		}
		stop()
		require.NoError(t, <-done)

		want := append([]int64{}, plain[:hold]...)
		want = append(want, high, early, released)
		want = append(want, plain[hold:]...)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, want, order, "after the held job: the higher priority, then the earlier run_at, then the released job in its old place, then the rest")
	})
}
