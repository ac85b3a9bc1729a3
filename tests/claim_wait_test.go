package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A claim's lease and the jobs' expiry count from the claim, not from the
// call. On SQLite a Claim waits for the writer, which the application's
// InTx (or a WorkTx handler, or another process) may hold for longer than
// the visibility asked for; the claim once read the clock before that wait,
// so it handed out a job whose lease had already lapsed (another Claim took
// it at once: two holders) and a job past its ExpiresAt (fresh-eyes review
// of wave 30). The test's transaction holds the writer while the clock
// moves on two minutes. On PostgreSQL the claim does not wait for it, so
// the clock moves before the claim.
func TestClaimLeaseCountsFromTheClaimNotTheCall(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		for round := range 5 {
			clk := newFakeClock()
			s := e.open(t, store.WithClock(clk.Now))
			q := s.Queue("lease")
			c := ctx(t)
			_, err := q.Enqueue(c, []byte("expiring"), store.EnqueueOpts{ExpiresAt: clk.t.Add(30 * time.Second)})
			require.NoError(t, err)
			_, err = q.Enqueue(c, []byte("lasting"), store.EnqueueOpts{})
			require.NoError(t, err)

			holding, release := make(chan struct{}), make(chan struct{})
			txDone := make(chan error, 1)
			go func() {
				txDone <- s.InTx(c, func(tc context.Context, tx store.Tx) error {
					_, err := tx.Exec(tc, "SELECT 1") // SQLite: the writer is the transaction's from here
					close(holding)
					<-release
					return err
				})
			}()
			<-holding
			read := clk.Arm()
			type claimed struct {
				jobs []*store.Job
				err  error
				at   time.Time // the store's clock when Claim returned
			}
			if e.name == "pg" { // no writer to wait for: the time moves before the claim
				clk.Advance(2 * time.Minute)
			}
			got := make(chan claimed, 1)
			go func() {
				js, err := q.Claim(c, "w1", 2, time.Minute)
				got <- claimed{js, err, clk.Now()}
			}()
			var r claimed
			if e.name == "pg" {
				r = <-got
				close(release)
			} else {
				<-read // the claim has begun; it cannot get the writer yet
				clk.Advance(2 * time.Minute)
				close(release)
				r = <-got
			}
			require.NoError(t, <-txDone)
			require.NoError(t, r.err)
			require.NotEmpty(t, r.jobs, "round %d", round)
			for _, j := range r.jobs {
				assert.True(t, j.ClaimExpiresAt.After(r.at), "round %d: job %q handed out with its lease lapsed: until %v, handed out at %v",
					round, j.Payload, j.ClaimExpiresAt, r.at)
				if j.ExpiresAt != nil {
					assert.True(t, j.ExpiresAt.After(r.at), "round %d: job %q handed out past its ExpiresAt %v, at %v",
						round, j.Payload, *j.ExpiresAt, r.at)
				}
			}
			again, err := q.Claim(c, "w2", 2, time.Minute)
			require.NoError(t, err)
			assert.Empty(t, again, "round %d: a second Claim took a job the first had just been handed", round)
			for _, j := range r.jobs {
				assert.NoError(t, j.Ack(c), "round %d: the first claim's ack", round)
			}
		}
	})
}
