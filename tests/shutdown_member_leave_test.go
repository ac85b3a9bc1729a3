package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestHardShutdownDoesNotWaitForAMembersLeave: a hard Shutdown rolls the
// application's open transactions back at once and returns within about
// 5 s (Shutdown's doc), also when a joined group member, which the
// shutdown makes leave, writes what such a transaction holds: the
// partition row a pending CommitTx locked, or on SQLite the writer any
// write holds. Before (attack58 F5) the shutdown made the members leave
// first and rolled the transactions back only after, so it waited until
// the application ended its transaction itself (for ever when that was
// Shutdown's own goroutine; here the application gives up after a
// minute). The rolled-back CommitTx committed nothing: a new member gets
// the event again.
func TestHardShutdownDoesNotWaitForAMembersLeave(t *testing.T) {
	forms := []string{"CommitTx pending", "EnqueueTx only"}
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, form int) {
		c := ctx(t)
		s, m, _, e1 := oneMemberAtItsFirstEvent(t, e, "hard-leave", "k", "k", "k")
		tx, err := s.Begin(c)
		require.NoError(t, err)
		if form == 0 {
			require.NoError(t, m.CommitTx(c, tx, e1))
		} else {
			_, err = s.Queue("hard-leave").EnqueueTx(c, tx, nil, store.EnqueueOpts{})
			require.NoError(t, err)
		}
		done := make(chan struct{})
		appGaveUp := make(chan struct{})
		go func() { // the application's goroutine holding tx, which never ends it in time
			defer close(appGaveUp)
			select {
			case <-done:
			case <-time.After(time.Minute):
			}
			_ = tx.Rollback(context.Background())
		}()
		hard, cancel := context.WithCancel(c)
		cancel()
		start := time.Now()
		err = s.Shutdown(hard)
		took := time.Since(start)
		close(done)
		<-appGaveUp
		require.ErrorIs(t, err, context.Canceled)
		assert.Less(t, took, 20*time.Second, "a hard Shutdown waited for the application's transaction instead of rolling it back")

		s2 := e.open(t)
		m2, err := s2.Stream("hard-leave").Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour, SafetyPoll: 50 * time.Millisecond})
		require.NoError(t, err)
		defer func() { _ = m2.Leave(context.Background()) }()
		// The first member's leave ran once the rollback freed what it
		// waited for: its partition (an hour's lease) is free at once.
		rc, rcancel := context.WithTimeout(c, 30*time.Second)
		defer rcancel()
		got, err := m2.Recv(rc)
		require.NoError(t, err, "the first member's partition was not released")
		assert.Equal(t, e1.Offset, got.Offset, "the rolled-back CommitTx committed its event")
	})
}
