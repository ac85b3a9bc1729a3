package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestSettleAndClaimRefuseOutOfBounds: a negative delay to Retry, Snooze
// and their Tx forms, and a Claim of more than 2^20 jobs, are refused with
// ErrInvalidArgument naming the queue, before any I/O, as every other
// negative option and bound is (README "Names and errors"): the delay
// counted as 0 and n was cut to 2^20, silently. A refused settle leaves the
// claim as it was: the job can still be acked.
func TestSettleAndClaimRefuseOutOfBounds(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("bounds")
		_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		_, err = q.Claim(c, "w", 1<<20+1, time.Minute)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), `claim "bounds"`)
		assert.Contains(t, err.Error(), "1048576")

		jobs, err := q.Claim(c, "w", 1<<20, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		j := jobs[0]
		for name, settle := range map[string]func() error{
			"Retry":  func() error { _, err := j.Retry(c, -time.Second, "x"); return err },
			"Snooze": func() error { return j.Snooze(c, -time.Second) },
			"RetryTx": func() error {
				return s.InTx(c, func(ctx context.Context, tx store.Tx) error {
					_, err := j.RetryTx(ctx, tx, -time.Second, "x")
					return err
				})
			},
			"SnoozeTx": func() error {
				return s.InTx(c, func(ctx context.Context, tx store.Tx) error { return j.SnoozeTx(ctx, tx, -time.Second) })
			},
		} {
			err := settle()
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
			assert.Contains(t, err.Error(), `"bounds"`, name)
			assert.Contains(t, err.Error(), "negative delay", name)
		}
		require.NoError(t, j.Ack(c), "the refused settles left the claim")
	})
}
