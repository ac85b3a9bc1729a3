package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAClaimHeldForATransactionalHandlerIsNeverCutShorter: on SQLite a
// WorkTx handler's transaction extends, while it holds the writer, the
// claims of the store's other jobs waiting for it, to the end of its
// hold (its Timeout and Visibility from then). It set them to that
// outright: the claim of a plain Work job whose worker has a longer
// Visibility (60 s), which its claim or a heartbeat had pushed past that
// end (a hold of 45 s and 1 s), was cut back to it until the commit set
// it back (review56 R3). Read in the transaction itself, after the
// extension (the handler reads the job with JobTx), the lease must be
// no earlier than the one committed before. On PostgreSQL nothing is
// held, and the same read sees the committed lease.
func TestAClaimHeldForATransactionalHandlerIsNeverCutShorter(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		for round := range 2 {
			qa, qb := s.Queue(fmt.Sprintf("hold-short-a-%d", round)), s.Queue(fmt.Sprintf("hold-short-b-%d", round))
			bIn, bRel := make(chan struct{}, 1), make(chan struct{})
			wc, cancel := context.WithCancel(c)
			done := make(chan error, 2)
			go func() {
				done <- qb.Work(wc, store.WorkOpts{Visibility: time.Minute, Concurrency: 1}, func(ctx context.Context, j *store.Job) error {
					bIn <- struct{}{}
					select {
					case <-bRel:
					case <-ctx.Done():
					}
					return nil
				})
			}()
			idB, err := qb.Enqueue(c, []byte("b"), store.EnqueueOpts{})
			require.NoError(t, err)
			select {
			case <-bIn:
			case <-c.Done():
				t.Fatal("b's handler never ran")
			}
			jb, err := qb.Job(c, idB)
			require.NoError(t, err)
			require.NotNil(t, jb.ClaimExpiresAt)
			committed := *jb.ClaimExpiresAt
			seen := make(chan *store.Job, 1)
			go func() {
				done <- qa.WorkTx(wc, store.WorkOpts{Visibility: time.Second, Timeout: 45 * time.Second, Concurrency: 1},
					func(ctx context.Context, tx store.Tx, _ *store.Job) error {
						j, err := qb.JobTx(ctx, tx, idB)
						if err != nil {
							return err
						}
						seen <- j
						return nil
					})
			}()
			_, err = qa.Enqueue(c, []byte("a"), store.EnqueueOpts{})
			require.NoError(t, err)
			var inTx *store.Job
			select {
			case inTx = <-seen:
			case <-c.Done():
				t.Fatal("a's handler never ran")
			}
			close(bRel)
			cancel()
			require.NoError(t, <-done)
			require.NoError(t, <-done)
			require.NotNil(t, inTx.ClaimExpiresAt)
			require.False(t, inTx.ClaimExpiresAt.Before(committed),
				"round %d: b's claim, as a's transaction held it, runs out at %v, %v before the lease committed before (%v)",
				round, *inTx.ClaimExpiresAt, committed.Sub(*inTx.ClaimExpiresAt), committed)
		}
	})
}
