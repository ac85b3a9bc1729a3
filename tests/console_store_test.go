package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// The store operations a console reads (issue 20, issue 19 item 4): idle
// queues listed, every final state counted, a job found by id alone, an
// outbox named by its own name, a schedule triggered by hand.

// TestQueuesListsIdleQueues: a queue whose jobs are all gone (acked and
// deleted) is still listed by Store.Queues, with zero counts, also by a
// store opened afterwards, and so is a queue a worker claimed from while it
// was empty; a queue whose only enqueue rolled back is not.
func TestQueuesListsIdleQueues(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("emails")
		_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.NoError(t, jobs[0].Ack(c))

		tx, err := s.Begin(c)
		require.NoError(t, err)
		_, err = s.Queue("never").EnqueueTx(c, tx, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(c))

		polled, err := e.open(t).Queue("polled").Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Empty(t, polled)

		for _, st := range []*store.Store{s, e.open(t)} {
			qs, err := st.Queues(c)
			require.NoError(t, err)
			require.Len(t, qs, 2, "the acked queue and the polled one: %+v", qs)
			assert.Equal(t, "emails", qs[0].Name)
			assert.Zero(t, qs[0].Stats)
			assert.Empty(t, qs[0].Outbox)
			assert.Equal(t, "polled", qs[1].Name)
		}
		// A plain enqueue registers the queue.
		_, err = s.Queue("never").Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		qs, err := s.Queues(c)
		require.NoError(t, err)
		require.Len(t, qs, 3)
		assert.Equal(t, "never", qs[1].Name)
		assert.EqualValues(t, 1, qs[1].Stats.Ready)
	})
}

// TestQueueStatsCountsEveryFinalState: completed (when kept), cancelled,
// expired and dead each have their own count, in Queue.Stats, Store.Queues
// and Store.Stats.
func TestQueueStatsCountsEveryFinalState(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("final")
		require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
		enq := func(opts store.EnqueueOpts) int64 {
			id, err := q.Enqueue(c, nil, opts)
			require.NoError(t, err)
			return id
		}
		for range 2 { // 2 completed
			enq(store.EnqueueOpts{})
		}
		jobs, err := q.Claim(c, "w", 2, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 2)
		for _, j := range jobs {
			require.NoError(t, j.Ack(c))
		}
		enq(store.EnqueueOpts{}) // 1 dead
		jobs, err = q.Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.NoError(t, jobs[0].Fail(c, "boom"))
		for range 3 { // 3 cancelled
			require.NoError(t, q.Cancel(c, enq(store.EnqueueOpts{})))
		}
		for range 4 { // 4 expired
			enq(store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Second)})
		}
		clk.Advance(time.Minute)
		n, err := q.SweepExpired(c)
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
		enq(store.EnqueueOpts{}) // 1 ready

		want := store.QueueStats{Ready: 1, Dead: 1, Completed: 2, Cancelled: 3, Expired: 4}
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, want, st)
		qs, err := s.Queues(c)
		require.NoError(t, err)
		require.Len(t, qs, 1)
		assert.Equal(t, want, qs[0].Stats)
		all, err := s.Stats(c)
		require.NoError(t, err)
		require.Len(t, all.Queues, 1)
		assert.Equal(t, want, all.Queues[0].QueueStats)
	})
}

// TestStoreJobFindsAnyQueue: Store.Job finds a job by id whatever its
// queue, an outbox's included, and says ErrNotFound for an unknown id.
func TestStoreJobFindsAnyQueue(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		a, err := s.Queue("a").Enqueue(c, []byte("in a"), store.EnqueueOpts{})
		require.NoError(t, err)
		ob := s.Outbox("orders")
		b, err := ob.Enqueue(c, []byte("in outbox"), store.EnqueueOpts{})
		require.NoError(t, err)

		j, err := s.Job(c, a)
		require.NoError(t, err)
		assert.Equal(t, "a", j.Queue)
		assert.Equal(t, []byte("in a"), j.Payload)
		j, err = s.Job(c, b)
		require.NoError(t, err)
		assert.Equal(t, ob.QueueName(), j.Queue)

		_, err = s.Job(c, b+1000)
		require.ErrorIs(t, err, store.ErrNotFound)
		var oe *store.OpError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, "job", oe.Op)

		qs, err := s.Queues(c)
		require.NoError(t, err)
		require.Len(t, qs, 2)
		assert.Equal(t, ob.QueueName(), qs[0].Name, "the reserved prefix sorts first")
		assert.Equal(t, "orders", qs[0].Outbox)
		assert.Equal(t, "a", qs[1].Name)
		assert.Empty(t, qs[1].Outbox)
	})
}

// TestScheduleTrigger: Trigger enqueues the schedule's job now, paused or
// not, and leaves its next boundary alone; an unknown schedule is
// ErrNotFound.
func TestScheduleTrigger(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		sc := s.Schedule("nightly")
		require.NoError(t, sc.Set(c, store.ScheduleSpec{Spec: "@daily", Queue: "reports", Payload: []byte(`{"r":1}`), Priority: 7, MaxAttempts: 3}))
		require.NoError(t, sc.Pause(c))
		before, err := sc.Info(c)
		require.NoError(t, err)

		id, err := sc.Trigger(c)
		require.NoError(t, err)
		j, err := s.Queue("reports").Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
		assert.Equal(t, []byte(`{"r":1}`), j.Payload)
		assert.Equal(t, 7, j.Priority)
		assert.Equal(t, 3, j.MaxAttempts)
		after, err := sc.Info(c)
		require.NoError(t, err)
		assert.Equal(t, before.NextFireAt, after.NextFireAt)
		assert.True(t, after.Paused)

		_, err = s.Schedule("nope").Trigger(c)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// TestStreamFollowFromAnOffset: Follow delivers the events after the
// given offset, then new ones as they commit, and saves no offset.
func TestStreamFollowFromAnOffset(t *testing.T) {
	eachEngineAlone(t, func(t *testing.T, e *engineEnv) { // alone: a wake must arrive within 3 s
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("tail")
		var offs []int64
		for i := range 3 {
			off, err := st.Publish(c, []byte{byte('a' + i)})
			require.NoError(t, err)
			offs = append(offs, off)
		}
		_, err := st.Follow(c, -1, store.SubscribeOpts{})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = st.Follow(c, 0, store.SubscribeOpts{AutoSaveEvery: 1})
		require.ErrorIs(t, err, store.ErrInvalidArgument)

		r, err := st.Follow(c, offs[0], store.SubscribeOpts{})
		require.NoError(t, err)
		defer r.Close()
		for _, want := range offs[1:] {
			ev, err := r.Recv(c)
			require.NoError(t, err)
			assert.Equal(t, want, ev.Offset)
		}
		// Published after Follow started: delivered by the wake, not a poll
		// (the safety poll is far longer than the test's patience).
		later, err := s.Stream("tail").Publish(c, []byte("d"))
		require.NoError(t, err)
		rc, cancel := context.WithTimeout(c, 3*time.Second)
		defer cancel()
		ev, err := r.Recv(rc)
		require.NoError(t, err)
		assert.Equal(t, later, ev.Offset)
		assert.Equal(t, []byte("d"), ev.Payload)
		require.ErrorIs(t, r.SaveOffset(c), store.ErrInvalidArgument)
	})
}

// TestStreamHeadsRaw: Stream.Heads lists current heads with raw payloads
// (not JSON), in key order, skipping tombstones' keys as Topic.Heads does.
func TestStreamHeadsRaw(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("users")
		_, err := st.PublishWithKey(c, "b", []byte("not json"))
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "a", []byte("A1"))
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "a", []byte("A2"))
		require.NoError(t, err)
		heads, err := st.Heads(c, "", 10)
		require.NoError(t, err)
		require.Len(t, heads, 2)
		assert.Equal(t, "a", heads[0].Key)
		assert.Equal(t, []byte("A2"), heads[0].Payload)
		assert.Equal(t, "b", heads[1].Key)
		heads, err = st.Heads(c, "a", 10)
		require.NoError(t, err)
		require.Len(t, heads, 1)
		assert.Equal(t, "b", heads[0].Key)
	})
}

// TestChangesSignalsAnyWrite: Store.Changes signals after an enqueue, a
// publish, a pause, a schedule's set, pause and delete and a consumer's
// reset, from this store and from another one (another process's writes
// arrive through the wake feed), and closes with its context.
func TestChangesSignalsAnyWrite(t *testing.T) {
	eachEngineAlone(t, func(t *testing.T, e *engineEnv) { // alone: each change must be signalled within 5 s
		s := e.open(t)
		other := e.open(t)
		c := ctx(t)
		wc, stop := context.WithCancel(c)
		ch, err := s.Changes(wc)
		require.NoError(t, err)
		drain := func() {
			for {
				select {
				case <-ch:
				default:
					return
				}
			}
		}
		expect := func(what string, write func() error) {
			t.Helper()
			drain()
			require.NoError(t, write())
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("no change signalled after %s", what)
			}
		}
		expect("an enqueue", func() error { _, err := s.Queue("q").Enqueue(c, nil, store.EnqueueOpts{}); return err })
		expect("a publish", func() error { _, err := s.Stream("st").Publish(c, nil); return err })
		expect("a pause", func() error { return s.Queue("q").Pause(c) })
		expect("another store's enqueue", func() error {
			_, err := other.Queue("q2").Enqueue(c, nil, store.EnqueueOpts{})
			return err
		})
		// A schedule's pause and delete and a consumer's reset, the console's
		// own actions, from another process too (on PostgreSQL they carried
		// no wake, and a console showed them only at its next sample).
		for _, w := range []*store.Store{s, other} {
			name := map[bool]string{true: "this store's ", false: "another store's "}[w == s]
			expect(name+"schedule set", func() error {
				return w.Schedule("sch").Set(c, store.ScheduleSpec{Spec: "@daily", Queue: "q"})
			})
			expect(name+"schedule pause", func() error { return w.Schedule("sch").Pause(c) })
			expect(name+"schedule delete", func() error { return w.Schedule("sch").Delete(c) })
			expect(name+"consumer reset", func() error { return w.Stream("st").ResetOffset(c, "reader", 1) })
			// A dead job requeued, then deleted (on PostgreSQL neither
			// carried a wake, review53a).
			dq := s.Queue("dead")
			id, err := dq.Enqueue(c, nil, store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			jobs, err := dq.Claim(c, "w", 1, time.Minute)
			require.NoError(t, err)
			require.Len(t, jobs, 1)
			require.NoError(t, jobs[0].Fail(c, "dead"))
			expect(name+"requeue", func() error { return w.Queue("dead").Requeue(c, id) })
			jobs, err = dq.Claim(c, "w", 1, time.Minute)
			require.NoError(t, err)
			require.Len(t, jobs, 1)
			require.NoError(t, jobs[0].Fail(c, "dead"))
			expect(name+"requeue of every dead job", func() error { _, err := w.Queue("dead").RequeueDead(c); return err })
			expect(name+"delete", func() error { return w.Queue("dead").Delete(c, id) })
		}
		stop()
		for range ch {
		}
	})
}

// TestStreamsIsStatsWithoutQueues: Store.Streams reports what Stats
// reports for streams.
func TestStreamsIsStatsWithoutQueues(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		_, err := s.Stream("b").Publish(c, []byte("x"))
		require.NoError(t, err)
		_, err = s.Stream("a").PublishWithKey(c, "k", []byte("v"))
		require.NoError(t, err)
		require.NoError(t, s.Stream("b").SaveOffset(c, "reader", 0))
		_, err = s.Queue("q").Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		streams, err := s.Streams(c)
		require.NoError(t, err)
		stats, err := s.Stats(c)
		require.NoError(t, err)
		require.Len(t, streams, 2)
		assert.Equal(t, stats.Streams, streams)
		assert.Equal(t, "a", streams[0].Name)
		assert.EqualValues(t, 1, streams[0].Keys)
		require.Len(t, streams[1].Consumers, 1)
		assert.EqualValues(t, 1, streams[1].Consumers[0].Lag)
	})
}
