package tests

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

// A client's subscription gets one event per handler run, of every
// outcome, with the job and the run's duration; a subscription to some
// kinds (JobFailed: retried and dead) gets only those.
func TestClientJobEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q, ob := s.Queue("jobs"), s.Outbox("hooks")
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
		all := cl.Subscribe(0)
		failed := cl.Subscribe(0, client.JobFailed)
		defer all.Close()
		defer failed.Close()

		kinds := []string{"ok", "snooze", "retry", "permanent", "last", "cancel", "panic"}
		ids := map[int64]string{}
		for _, k := range kinds {
			opts := store.EnqueueOpts{}
			if k == "last" || k == "panic" {
				opts.MaxAttempts = 1
			}
			id, err := q.Enqueue(c, []byte(k), opts)
			require.NoError(t, err)
			ids[id] = k
		}
		obID, err := ob.Enqueue(c, []byte("hook"), store.EnqueueOpts{})
		require.NoError(t, err)
		ids[obID] = "outbox"
		running := make(chan struct{})
		require.NoError(t, cl.Handle(q, store.WorkOpts{Concurrency: len(kinds), Backoff: func(int) time.Duration { return time.Hour }},
			func(ctx context.Context, j *store.Job) error {
				switch string(j.Payload) {
				case "snooze":
					return store.Snooze(time.Hour)
				case "retry", "last":
					return errors.New("boom")
				case "permanent":
					return store.Permanent(errors.New("bad"))
				case "panic":
					panic("boom")
				case "cancel":
					close(running)
					<-ctx.Done()
					return context.Cause(ctx)
				}
				time.Sleep(2 * time.Millisecond) // a duration to see
				return nil
			}))
		require.NoError(t, cl.HandleOutbox(ob, store.OutboxOpts{}, func(context.Context, *store.Job) error { return nil }))
		require.NoError(t, cl.Start(c))
		<-running
		require.NoError(t, q.Cancel(c, func() int64 {
			for id, k := range ids {
				if k == "cancel" {
					return id
				}
			}
			return 0
		}()))

		got := map[string]client.JobEventKind{}
		for range ids {
			select {
			case ev := <-all.C():
				got[ids[ev.Job.ID]] = ev.Kind
				if ids[ev.Job.ID] == "ok" {
					assert.GreaterOrEqual(t, ev.Duration, 2*time.Millisecond)
					assert.NoError(t, ev.Err)
				}
				if ev.Kind == client.JobRetried {
					assert.EqualError(t, ev.Err, "boom")
				}
				if ids[ev.Job.ID] == "panic" {
					assert.ErrorContains(t, ev.Err, "handler panicked: boom", "a panic counts as an error")
				}
			case <-c.Done():
				t.Fatal("events missing", got)
			}
		}
		require.NoError(t, cl.Stop(c))
		assert.Equal(t, map[string]client.JobEventKind{"ok": "completed", "snooze": "snoozed", "retry": "retried",
			"permanent": "dead", "last": "dead", "cancel": "cancelled", "panic": "dead", "outbox": "completed"}, got)
		var failedKinds []client.JobEventKind
		for range 4 {
			failedKinds = append(failedKinds, (<-failed.C()).Kind)
		}
		assert.ElementsMatch(t, []client.JobEventKind{client.JobRetried, client.JobDead, client.JobDead, client.JobDead}, failedKinds)
		select {
		case ev := <-failed.C():
			t.Fatalf("an event of another kind: %+v", ev)
		default:
		}
		assert.Zero(t, all.Dropped())
	})
}

// A full subscription drops the newest events and counts them; workers
// never wait for a reader. Close closes the channel.
func TestClientJobEventsDropWhenFull(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q := s.Queue("jobs")
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
		small := cl.Subscribe(2)
		big := cl.Subscribe(100)
		for range 10 {
			_, err := q.Enqueue(c, nil, store.EnqueueOpts{})
			require.NoError(t, err)
		}
		require.NoError(t, cl.Handle(q, store.WorkOpts{}, func(context.Context, *store.Job) error { return nil }))
		require.NoError(t, cl.Start(c))
		for range 10 {
			<-big.C() // every run ended, none waited for small's reader
		}
		require.NoError(t, cl.Stop(c))
		assert.EqualValues(t, 8, small.Dropped())
		assert.Len(t, small.C(), 2)
		small.Close()
		n := 0
		for range small.C() {
			n++
		}
		assert.Equal(t, 2, n, "Close closes the channel; buffered events stay readable")
		big.Close()
	})
}

// Events say what the lifecycle did after the handler returned, not what
// its result predicts: an ack that finds the claim taken by another worker
// (the lease lapsed) or the job deleted reports a lost claim with the state
// the job was found in, and an outbox's last failed delivery is dead.
// Each run has exactly one event.
func TestClientJobEventsAfterSettle(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		// A second process whose clock runs two hours ahead: the first's
		// claims (an hour of visibility) have lapsed for it.
		later := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
		reclaim, del, ob := s.Queue("reclaim"), s.Queue("delete"), s.Outbox("hooks")
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
		all := cl.Subscribe(0)
		defer all.Close()

		ids := map[int64]string{}
		for k, enq := range map[string]func() (int64, error){
			"reclaimed": func() (int64, error) { return reclaim.Enqueue(c, []byte("x"), store.EnqueueOpts{}) },
			"deleted":   func() (int64, error) { return del.Enqueue(c, []byte("x"), store.EnqueueOpts{}) },
			"outbox":    func() (int64, error) { return ob.Enqueue(c, []byte("x"), store.EnqueueOpts{}) },
		} {
			id, err := enq()
			require.NoError(t, err)
			ids[id] = k
		}
		opts := store.WorkOpts{Visibility: time.Hour} // no heartbeat within the test
		var thief int64
		require.NoError(t, cl.Handle(reclaim, opts, func(ctx context.Context, j *store.Job) error {
			jobs, err := later.Queue("reclaim").Claim(ctx, "thief", 1, time.Hour)
			if err != nil || len(jobs) != 1 || jobs[0].ID != j.ID {
				return store.Permanent(fmt.Errorf("the other worker could not take the job: %v %v", jobs, err))
			}
			thief = jobs[0].ID
			return nil // its ack finds the claim gone
		}))
		require.NoError(t, cl.Handle(del, opts, func(ctx context.Context, j *store.Job) error {
			ctx = context.WithoutCancel(ctx) // the cancel ends the handler's context
			if err := del.Cancel(ctx, j.ID); err != nil {
				return store.Permanent(err)
			}
			if err := del.Delete(ctx, j.ID); err != nil {
				return store.Permanent(err)
			}
			return nil
		}))
		require.NoError(t, cl.HandleOutbox(ob, store.OutboxOpts{WorkOpts: opts, MaxAttempts: 1},
			func(context.Context, *store.Job) error { return errors.New("unreachable") }))
		require.NoError(t, cl.Start(c))

		got := map[string]client.JobEvent{}
		for range ids {
			select {
			case ev := <-all.C():
				k := ids[ev.Job.ID]
				_, twice := got[k]
				require.False(t, twice, "a second event for %s: %+v", k, ev)
				got[k] = ev
			case <-c.Done():
				t.Fatal("events missing", got)
			}
		}
		require.NoError(t, cl.Stop(c))
		select {
		case ev, ok := <-all.C():
			require.False(t, ok, "an extra event: %+v", ev)
		default:
		}

		assert.Equal(t, client.JobLost, got["reclaimed"].Kind)
		assert.Equal(t, store.OutcomeClaimLost, got["reclaimed"].Result.Outcome)
		assert.Equal(t, store.JobRunning, got["reclaimed"].Result.State, "found held by the other worker")
		assert.NotZero(t, thief)

		assert.Equal(t, client.JobLost, got["deleted"].Kind, "%+v", got["deleted"])
		assert.Equal(t, store.JobState(""), got["deleted"].Result.State, "the job is gone")

		assert.Equal(t, client.JobDead, got["outbox"].Kind, "an outbox's last attempt is dead, not retried")
		assert.Equal(t, store.JobDead, got["outbox"].Result.State)
		assert.EqualError(t, got["outbox"].Err, "unreachable")
		for id, k := range ids {
			if k == "outbox" {
				m, err := ob.Job(c, id)
				require.NoError(t, err)
				assert.Equal(t, store.JobDead, m.State)
			}
		}
	})
}

// A job its handler puts back itself (Retry, Snooze, Release, and the Tx
// forms in a transactional handler) has exactly one event of that
// put-back, with the state and the RunAt the job was left with; a Retry
// with no attempt left is dead. The result names the settle (SettledAs).
func TestClientJobEventsForHandlerPutBacks(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q, qtx := s.Queue("jobs"), s.Queue("txjobs")
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
		all := cl.Subscribe(0)
		defer all.Close()

		ids := map[int64]string{}
		enqueue := func(q *store.Queue, k string, opts store.EnqueueOpts) {
			id, err := q.Enqueue(c, []byte(k), opts)
			require.NoError(t, err)
			ids[id] = k
		}
		enqueue(q, "retry", store.EnqueueOpts{})
		enqueue(q, "retry-last", store.EnqueueOpts{MaxAttempts: 1})
		enqueue(q, "snooze", store.EnqueueOpts{})
		enqueue(q, "release", store.EnqueueOpts{})
		enqueue(qtx, "retrytx", store.EnqueueOpts{})
		enqueue(qtx, "snoozetx", store.EnqueueOpts{})

		released := false // the released job's second run completes it
		require.NoError(t, cl.Handle(q, store.WorkOpts{Concurrency: 1}, func(ctx context.Context, j *store.Job) error {
			var err error
			switch string(j.Payload) {
			case "retry", "retry-last":
				_, err = j.Retry(ctx, time.Hour, "again")
			case "snooze":
				err = j.Snooze(ctx, 2*time.Hour)
			case "release":
				if released {
					return nil
				}
				released = true
				err = j.Release(ctx)
			}
			if err != nil {
				return store.Permanent(err) // an event of another kind
			}
			return nil // the job is settled: its result changes nothing
		}))
		require.NoError(t, cl.HandleTx(qtx, store.WorkOpts{Concurrency: 1}, func(ctx context.Context, tx store.Tx, j *store.Job) error {
			var err error
			switch string(j.Payload) {
			case "retrytx":
				_, err = j.RetryTx(ctx, tx, 3*time.Hour, "again")
			case "snoozetx":
				err = j.SnoozeTx(ctx, tx, 4*time.Hour)
			}
			if err != nil {
				return store.Permanent(err)
			}
			return nil
		}))
		require.NoError(t, cl.Start(c))

		got := map[string][]client.JobEvent{}
		for range 7 { // one per run: the released job runs twice
			select {
			case ev := <-all.C():
				k := ids[ev.Job.ID]
				got[k] = append(got[k], ev)
			case <-c.Done():
				t.Fatal("events missing", got)
			}
		}
		require.NoError(t, cl.Stop(c))
		select {
		case ev, ok := <-all.C():
			require.False(t, ok, "an extra event: %+v", ev)
		default:
		}

		kinds := map[string][]client.JobEventKind{}
		for k, evs := range got {
			for _, ev := range evs {
				kinds[k] = append(kinds[k], ev.Kind)
			}
		}
		assert.Equal(t, map[string][]client.JobEventKind{
			"retry": {client.JobRetried}, "retry-last": {client.JobDead}, "snooze": {client.JobSnoozed},
			"release": {client.JobReleased, client.JobCompleted},
			"retrytx": {client.JobRetried}, "snoozetx": {client.JobSnoozed},
		}, kinds)

		settledAs := map[string]store.Outcome{"retry": store.OutcomeRetried, "retry-last": store.OutcomeFailed,
			"snooze": store.OutcomeSnoozed, "release": store.OutcomeReleased,
			"retrytx": store.OutcomeRetried, "snoozetx": store.OutcomeSnoozed}
		for k, want := range settledAs {
			require.NotEmpty(t, got[k], k)
			res := got[k][0].Result
			assert.Equal(t, store.OutcomeSettledByHandler, res.Outcome, k)
			assert.Equal(t, want, res.SettledAs, k)
			assert.NoError(t, res.SettleErr, k)
		}
		assert.Equal(t, store.JobDead, got["retry-last"][0].Result.State)
		assert.True(t, got["retry-last"][0].Result.RunAt.IsZero())

		// The put-backs' state and RunAt are the job's as stored.
		for id, k := range ids {
			if k == "retry-last" || k == "release" {
				continue
			}
			qq := q
			if k == "retrytx" || k == "snoozetx" {
				qq = qtx
			}
			j, err := qq.Job(c, id)
			require.NoError(t, err)
			res := got[k][0].Result
			assert.Equal(t, store.JobPending, j.State, k)
			assert.Equal(t, store.JobPending, res.State, k)
			assert.True(t, j.RunAt.Equal(res.RunAt), "%s: stored %v, event %v", k, j.RunAt, res.RunAt)
		}
		ev := got["release"][0]
		assert.Equal(t, store.JobPending, ev.Result.State)
		assert.True(t, ev.Job.RunAt.Equal(ev.Result.RunAt), "a released job keeps its RunAt: %v, event %v", ev.Job.RunAt, ev.Result.RunAt)
		assert.Equal(t, store.OutcomeAcked, got["release"][1].Result.Outcome)
	})
}
