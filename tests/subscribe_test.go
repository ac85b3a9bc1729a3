package tests

import (
	"context"
	"errors"
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
