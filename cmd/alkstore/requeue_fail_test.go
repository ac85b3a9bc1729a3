package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestCLIRequeueAllDeadFailureDrawsNoFullBar: a requeue --all-dead that
// fails draws no full progress bar (review58a F3: "[####...] 1/1" on
// stderr, then the error: a line that says every dead job moved), and one
// that fails after a batch committed says how many moved, of the outbox
// for --outbox, as the success line does. PostgreSQL only: a trigger
// refuses the requeue (the first time, or past the first batch of 1,000).
func TestCLIRequeueAllDeadFailureDrawsNoFullBar(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		if !strings.Contains(dsn, "://") && !strings.Contains(dsn, "=") {
			t.Skip("pg only: a trigger refuses the requeue")
		}
		ok(t, dsn, "migrate", "up")
		ctx := context.Background()
		s := open(t, dsn)
		q := s.Queue("emails")
		_, err := q.Enqueue(ctx, nil, store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		claimed, err := q.Claim(ctx, "w", 10, time.Minute)
		require.NoError(t, err)
		require.NoError(t, claimed[0].Fail(ctx, "x"))

		// 1,001 dead outbox messages: the first batch of 1,000 moves.
		ob := s.Outbox("hooks")
		const dead = 1001
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			for range dead {
				if _, err := ob.EnqueueTx(ctx, tx, []byte("hook"), store.EnqueueOpts{}); err != nil {
					return err
				}
			}
			return nil
		}))
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() {
			ran <- ob.Run(runCtx, store.OutboxOpts{}, func(context.Context, *store.Job) error {
				return store.Permanent(errors.New("gone"))
			})
		}()
		require.Eventually(t, func() bool {
			st, err := ob.Stats(ctx)
			return err == nil && st.Dead == dead
		}, 2*time.Minute, 20*time.Millisecond)
		stop()
		<-ran

		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `CREATE TABLE public.requeued (queue text PRIMARY KEY, n int NOT NULL);
CREATE FUNCTION public.no_requeue() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE moved int;
BEGIN
  IF OLD.state = 'dead' AND NEW.state = 'pending' THEN
    INSERT INTO public.requeued VALUES (OLD.queue, 1) ON CONFLICT (queue) DO UPDATE SET n = requeued.n + 1 RETURNING n INTO moved;
    IF OLD.queue = 'emails' OR moved > 1000 THEN RAISE EXCEPTION 'no requeue'; END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER no_requeue BEFORE UPDATE ON alkstore.jobs FOR EACH ROW EXECUTE FUNCTION public.no_requeue();`)
		require.NoError(t, err)

		r := cli(t, dsn, "queues", "requeue", "emails", "--all-dead")
		assert.Equal(t, 1, r.code, r.err)
		assert.Contains(t, r.err, "no requeue")
		assert.NotContains(t, r.err, "1/1", "a full progress bar on a failed requeue")
		assert.NotContains(t, r.err, "requeued")

		r = cli(t, dsn, "queues", "requeue", "--outbox", "hooks", "--all-dead")
		assert.Equal(t, 1, r.code, r.err)
		assert.Contains(t, r.err, "requeued 1000 dead jobs of outbox hooks, then: ")
		assert.Contains(t, r.err, "no requeue")
		assert.NotContains(t, r.err, "1001/1001", "a full progress bar on a failed requeue")
		assert.Contains(t, r.err, "] 1000/1001\n", "the bar says what moved")
		t.Logf("stderr: %q", r.err)
	})
}
