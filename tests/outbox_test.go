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

// outboxSettled reports whether the outbox has nothing left to deliver.
func outboxSettled(t *testing.T, c context.Context, ob *store.Outbox) func() bool {
	return func() bool {
		st, err := ob.Stats(c)
		require.NoError(t, err)
		return st.Ready+st.Scheduled+st.Running == 0
	}
}

// runOutbox runs ob until the test ends.
func runOutbox(t *testing.T, ob *store.Outbox, opts store.OutboxOpts, deliver store.Handler) {
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan struct{})
	go func() { assert.NoError(t, ob.Run(c, opts, deliver)); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestOutboxCommitsWithTheOrder: a message written in the order's
// transaction is delivered once; one whose transaction rolled back, never.
func TestOutboxCommitsWithTheOrder(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		ob := s.Outbox("webhooks")
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			_, err := tx.Exec(c, createOrders)
			return err
		}))
		place := func(id int, fail error) error {
			return s.InTx(c, func(c context.Context, tx store.Tx) error {
				if _, err := tx.Exec(c, insertOrder, id, "order"); err != nil {
					return err
				}
				if _, err := ob.EnqueueTx(c, tx, fmt.Appendf(nil, "order %d placed", id), store.EnqueueOpts{}); err != nil {
					return err
				}
				return fail
			})
		}
		require.NoError(t, place(1, nil))
		boom := errors.New("payment declined")
		require.ErrorIs(t, place(2, boom), boom)

		var mu sync.Mutex
		var delivered []string
		runOutbox(t, ob, store.OutboxOpts{Concurrency: 4}, func(_ context.Context, m *store.Job) error {
			mu.Lock()
			defer mu.Unlock()
			delivered = append(delivered, string(m.Payload))
			return nil
		})
		require.Eventually(t, outboxSettled(t, c, ob), 10*time.Second, time.Millisecond)

		mu.Lock()
		assert.Equal(t, []string{"order 1 placed"}, delivered, "the committed message once; the rolled-back one never")
		mu.Unlock()
		st, err := ob.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Dead)
		var orders int
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			return tx.QueryRow(c, "SELECT count(*) FROM orders").Scan(&orders)
		}))
		assert.Equal(t, 1, orders)

		// Auto-commit enqueue works too, and wakes the running deliverer.
		_, err = ob.Enqueue(c, []byte("resent"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(delivered) == 2
		}, 10*time.Second, time.Millisecond)
	})
}

// TestOutboxRetriesThenDead: a failing delivery is retried after its backoff
// until MaxAttempts deliveries failed, then the message is dead with the
// last error, and can be requeued.
func TestOutboxRetriesThenDead(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		ob := s.Outbox("flaky")
		id, err := ob.Enqueue(c, []byte("hello"), store.EnqueueOpts{})
		require.NoError(t, err)

		const backoff = 30 * time.Millisecond
		var mu sync.Mutex
		var tries []time.Time
		var backoffs []int
		opts := store.OutboxOpts{MaxAttempts: 3, Backoff: func(attempt int) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			backoffs = append(backoffs, attempt)
			return backoff
		}}
		delivered := make(chan struct{}, 10)
		runOutbox(t, ob, opts, func(_ context.Context, m *store.Job) error {
			mu.Lock()
			defer mu.Unlock()
			tries = append(tries, time.Now())
			delivered <- struct{}{}
			return fmt.Errorf("endpoint answered 503 (try %d)", m.Attempts)
		})
		require.Eventually(t, func() bool {
			st, err := ob.Stats(c)
			require.NoError(t, err)
			return st.Dead == 1
		}, 10*time.Second, time.Millisecond)

		mu.Lock()
		assert.Len(t, tries, 3, "MaxAttempts deliveries")
		assert.Equal(t, []int{1, 2}, backoffs, "a backoff before each retry, none after the last")
		for i := 1; i < len(tries); i++ {
			assert.GreaterOrEqual(t, tries[i].Sub(tries[i-1]), backoff, "retry %d waited its backoff", i)
		}
		mu.Unlock()
		m, err := ob.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, m.State)
		assert.Contains(t, m.LastError, "endpoint answered 503 (try 3)")
		assert.True(t, outboxSettled(t, c, ob)())
		dead, err := ob.Jobs(c, store.JobsOpts{State: store.JobDead})
		require.NoError(t, err)
		require.Len(t, dead, 1, "the outbox's dead page")
		assert.Equal(t, id, dead[0].ID)

		for range 3 {
			<-delivered // the three deliveries above
		}
		require.NoError(t, ob.Requeue(c, id))
		// The delivery itself, to the test's deadline: 10 s of polling
		// once ran out under load 20-34. A requeue landing while the loop
		// is between a short claim and its sleep is claimed at once (see
		// TestRequeueBetweenAShortClaimAndTheSleepWakesTheWorker).
		select {
		case <-delivered:
		case <-c.Done():
			t.Fatal("a requeued message is delivered again")
		}
	})
}

// TestOutboxNames: the backing queue is reachable only through the outbox,
// and outbox names are validated like any other name.
func TestOutboxNames(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		_, err := s.Queue("__alk_outbox:x").Enqueue(c, []byte("sneaky"), store.EnqueueOpts{})
		require.ErrorIs(t, err, store.ErrReservedName)
		_, err = s.Queue(s.Outbox("x").QueueName()).Claim(c, "w", 1, time.Minute)
		require.ErrorIs(t, err, store.ErrReservedName)

		_, err = s.Outbox("").Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.ErrorIs(t, err, store.ErrInvalidName)
		_, err = s.Outbox("__alk").Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.ErrorIs(t, err, store.ErrReservedName)
		require.ErrorIs(t, s.Outbox("").Run(c, store.OutboxOpts{}, func(context.Context, *store.Job) error { return nil }),
			store.ErrInvalidName)
		require.ErrorIs(t, s.Outbox("x").Run(c, store.OutboxOpts{MaxAttempts: -1}, nil), store.ErrInvalidArgument)

		ob := s.Outbox("x")
		assert.Equal(t, "__alk_outbox:x", ob.QueueName())
		_, err = ob.Enqueue(c, []byte("fine"), store.EnqueueOpts{})
		require.NoError(t, err)
		st, err := ob.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, int64(1), st.Ready)
	})
}
