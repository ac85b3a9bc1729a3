package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/store"
)

// TestTxOperationsAllocateNoMoreThanAutoCommit: a one-row Enqueue and
// Publish made in a transaction allocate at most one object more than the
// same calls in auto-commit (none more on PostgreSQL; SQLite runs a
// transaction's statement through database/sql's Tx, one more). Each operation in a transaction made closures over
// the Tx and its ctx (the target's failed and afterCommit), copied the
// transaction's operations to the heap, and a publish built its wake func:
// on PostgreSQL EnqueueTx made 14 allocations to Enqueue's 11 and
// PublishTx 13 to Publish's 9 (SQLite 16 to 12, 15 to 10). Not parallel (the count is the process's),
// the engines one after the other, with a ctx never cancelled (pgx watches
// a cancellable one with an allocation or two a query) and the gate window
// an hour, so every measured write is gated: the count is the write's own.
// The auto-commit calls run before the transaction begins: while one is
// open, each arms the leak nudge's timer (lifecycle.whileWaiting).
func TestTxOperationsAllocateNoMoreThanAutoCommit(t *testing.T) {
	eachEngineInTurn(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := context.Background()
		const name = "allocs"
		defer wake.SetGateWindow("q:"+name, time.Hour)()
		defer wake.SetGateWindow("s:"+name, time.Hour)()
		q, st := s.Queue(name), s.Stream(name)
		payload := []byte(`{"to":"someone@example.com"}`)
		allocs := func(what string, op func() error) float64 {
			for range 3 { // warm: the queue's registration, the prepared statements, the gate's entry
				require.NoError(t, op(), what)
			}
			var opErr error
			n := testing.AllocsPerRun(200, func() {
				if err := op(); err != nil && opErr == nil {
					opErr = err
				}
			})
			require.NoError(t, opErr, what)
			return n
		}
		enq := allocs("Enqueue", func() error { _, err := q.Enqueue(c, payload, store.EnqueueOpts{}); return err })
		pub := allocs("Publish", func() error { _, err := st.Publish(c, payload); return err })
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(c) }()
		enqTx := allocs("EnqueueTx", func() error { _, err := q.EnqueueTx(c, tx, payload, store.EnqueueOpts{}); return err })
		pubTx := allocs("PublishTx", func() error { _, err := st.PublishTx(c, tx, payload); return err })
		t.Logf("allocations a call: Enqueue %.1f, EnqueueTx %.1f, Publish %.1f, PublishTx %.1f", enq, enqTx, pub, pubTx)
		require.LessOrEqual(t, enqTx, enq+1.5, "EnqueueTx allocates more than Enqueue and one")
		require.LessOrEqual(t, pubTx, pub+1.5, "PublishTx allocates more than Publish and one")
	})
}
