package tests

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAGroupMembersTransactionKeepsTheClaimsWaitingForTheWriter: on
// SQLite a consumer group member's ConsumeTx handler holds the writer for
// its whole run, as a WorkTx handler's does, but only WorkTx's extended
// the claims of the store's jobs waiting for it: a plain Work handler
// running past its lease beside a member's handler was told its claim
// was lost once the writer was free, and its job (MaxAttempts 1) ended
// dead (attack57 F5: 3 of 3 runs); PostgreSQL's heartbeats kept it. The
// Work handler runs until the member's handler returned; the member's
// handler holds its transaction until the job's lease as claimed has run
// out (on SQLite it lapses under the writer; on PostgreSQL heartbeats
// extend it), then commits, or fails (its transaction rolled back, the
// event delivered again), or returns nil with a write that a DEFERRABLE
// INITIALLY DEFERRED foreign key refuses at COMMIT (SQLite opened with
// foreign_keys on: the failed COMMIT rolled the transaction back whole,
// the claims kept in it with it, and the job ended dead, 8 of 8: review57
// F1). The job must run once and be acked. Several rounds.
func TestAGroupMembersTransactionKeepsTheClaimsWaitingForTheWriter(t *testing.T) {
	const vis = time.Second
	const rounds = 2
	eachEngineEachForm(t, []string{"commits", "fails", "commit refused"}, func(t *testing.T, e *engineEnv, form int) {
		dsn := e.dsn
		if e.name == "lite" {
			dsn = "file:" + e.dsn + "?_pragma=foreign_keys(1)"
		}
		c := ctx(t)
		s, err := store.Open(c, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			for _, stmt := range []string{
				`CREATE TABLE keep_parent (id bigint PRIMARY KEY)`,
				`CREATE TABLE keep_child (pid bigint REFERENCES keep_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
			} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			return nil
		}))
		st := s.Stream("keep-claims")
		q := s.Queue("keep-claims")
		var memberRuns atomic.Int32
		var held atomic.Bool
		var mu sync.Mutex
		var lease time.Time               // the job's lease as claimed, this round
		memberDone := make(chan struct{}) // closed by the member's first handler of the round
		gctx, gcancel := context.WithCancel(c)
		defer gcancel()
		gdone := make(chan error, 1)
		go func() {
			gdone <- st.Group("g").ConsumeTx(gctx, store.GroupOpts{Member: "m", Partitions: 1}, func(ctx context.Context, tx store.Tx, ev store.Event) error {
				if memberRuns.Add(1)%2 == 0 { // an event delivered again
					return nil
				}
				mu.Lock()
				until, done := lease.Add(vis/4), memberDone
				mu.Unlock()
				for time.Now().Before(until) {
					time.Sleep(20 * time.Millisecond)
				}
				held.Store(true)
				close(done)
				switch form {
				case 1:
					return errors.New("the member's handler failed")
				case 2:
					_, err := tx.Exec(ctx, `INSERT INTO keep_child VALUES (42)`) // no parent 42
					return err
				}
				return nil
			})
		}()
		for round := range rounds {
			held.Store(false)
			memberRuns.Store(0)
			var runs atomic.Int32
			var lostCause atomic.Value
			claimed := make(chan struct{})
			mu.Lock()
			memberDone = make(chan struct{})
			done := memberDone
			mu.Unlock()
			wctx, wcancel := context.WithCancel(c)
			wdone := make(chan error, 1)
			go func() {
				wdone <- q.Work(wctx, store.WorkOpts{Visibility: vis, Timeout: 30 * time.Second, Concurrency: 1, Batch: 1}, func(ctx context.Context, j *store.Job) error {
					if runs.Add(1) == 1 {
						mu.Lock()
						lease = *j.ClaimExpiresAt
						mu.Unlock()
						close(claimed)
					}
					select {
					case <-done: // the member's handler returned
						return nil
					case <-ctx.Done():
						lostCause.Store(context.Cause(ctx).Error())
						return ctx.Err()
					}
				})
			}()
			id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
			<-claimed
			_, err = st.Publish(c, []byte("ev"))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				j, err := q.Job(c, id)
				return errors.Is(err, store.ErrNotFound) || err == nil && j.State == store.JobDead
			}, 30*time.Second, 20*time.Millisecond, "round %d: the job was settled", round)
			wcancel()
			require.NoError(t, <-wdone)
			assert.True(t, held.Load(), "round %d: the member's handler held its transaction past the job's lease as claimed", round)
			j, err := q.Job(c, id)
			if !assert.ErrorIs(t, err, store.ErrNotFound, "round %d: the job was acked", round) && err == nil {
				t.Errorf("round %d: the job ended %s (%q)", round, j.State, j.LastError)
			}
			assert.Equal(t, int32(1), runs.Load(), "round %d: the job ran once", round)
			assert.Nil(t, lostCause.Load(), "round %d: the handler was not cancelled", round)
		}
		gcancel()
		<-gdone
	})
}
