package tests

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Left open by the fifty-third session: TestOutboxRetriesThenDead/lite once
// waited more than 10 s for a requeued message under load 20-34.

// fromUntilNextDue reports whether the caller was called, at any depth,
// from the worker loop's untilNextDue: the loop's reckoning of its sleep
// after a claim came back short, before it sleeps.
func fromUntilNextDue() bool {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "(*worker).untilNextDue") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestRequeueBetweenAShortClaimAndTheSleepWakesTheWorker: a requeue that
// commits while the worker loop is between a claim that came back short
// (it read the job still dead) and its sleep is claimed at once: its wake,
// sent while the loop was not waiting for one, is kept for the sleep (a
// subscriber's channel holds one pending wake), not lost. The interleaving
// is forced: the store's clock runs the requeue, to its commit and wake,
// when the loop asks the time from untilNextDue, after the short claim
// and before the loop sleeps. PollInterval is an hour, so a lost wake
// leaves the job waiting past the test's bound. Not a defect on main (the
// test passes there); a loop that dropped wakes sent outside its sleep
// (checked by draining the loop's wake channel as it goes to rest) fails
// it: "the requeued job was not claimed". TestOutboxRetriesThenDead's
// last wait was 10 s of polling on a loaded machine; it now waits on the
// delivery itself, to the test's deadline.
func TestRequeueBetweenAShortClaimAndTheSleepWakesTheWorker(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		var armed atomic.Pointer[func()]
		clock := func() time.Time {
			if fn := armed.Load(); fn != nil && fromUntilNextDue() && armed.CompareAndSwap(fn, nil) {
				(*fn)()
			}
			return time.Now()
		}
		s := e.open(t, store.WithClock(clock))
		c := ctx(t)
		q := s.Queue("requeue-wake")
		dead, err := q.Enqueue(c, []byte("dies"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		// A job due in an hour: untilNextDue always has a due time to
		// reckon the sleep against, so it asks the clock.
		_, err = q.Enqueue(c, []byte("later"), store.EnqueueOpts{Delay: time.Hour})
		require.NoError(t, err)

		var mu sync.Mutex
		runs := map[string]int{}
		ran := make(chan string, 10)
		runWork(t, q, store.WorkOpts{Concurrency: 4, PollInterval: time.Hour}, func(_ context.Context, j *store.Job) error {
			mu.Lock()
			runs[string(j.Payload)]++
			n := runs[string(j.Payload)]
			mu.Unlock()
			ran <- string(j.Payload)
			if string(j.Payload) == "dies" && n == 1 {
				return store.Permanent(errors.New("first delivery fails for good"))
			}
			return nil
		})
		waitRan := func(want string) {
			t.Helper()
			select {
			case got := <-ran:
				require.Equal(t, want, got)
			case <-c.Done():
				t.Fatalf("%s did not run", want)
			}
		}
		waitRan("dies")
		for { // settled dead (the settle follows the handler's return)
			j, err := q.Job(c, dead)
			require.NoError(t, err)
			if j.State == store.JobDead {
				break
			}
			select {
			case <-c.Done():
				t.Fatal("the job never went dead")
			case <-time.After(time.Millisecond):
			}
		}

		// The worker sleeps (an hour, or until a wake). Arm the requeue,
		// then wake the loop with a job it claims: that claim returns one
		// job of four slots (short), with the dead job still dead, and the
		// loop reckons its sleep: the requeue commits and wakes there.
		requeued := make(chan error, 1)
		fn := func() {
			done := make(chan struct{})
			go func() { defer close(done); requeued <- q.Requeue(c, dead) }()
			<-done
		}
		armed.Store(&fn)
		_, err = q.Enqueue(c, []byte("wakes it"), store.EnqueueOpts{})
		require.NoError(t, err)
		select {
		case err := <-requeued:
			require.NoError(t, err)
		case <-c.Done():
			t.Fatal("the loop never reckoned a sleep after a short claim")
		}

		// Both run, in either order: "wakes it" was claimed before the
		// requeue, "dies" only after it.
		bound, cancel := context.WithTimeout(c, 30*time.Second) // the poll is an hour
		defer cancel()
		got := map[string]bool{}
		for len(got) < 2 {
			select {
			case p := <-ran:
				got[p] = true
			case <-bound.Done():
				t.Fatalf("the requeued job was not claimed (ran %v): its wake, sent between a short claim and the sleep, was lost", got)
			}
		}
		require.Equal(t, map[string]bool{"wakes it": true, "dies": true}, got)
	})
}
