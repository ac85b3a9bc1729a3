package tests

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAGroupHandlerPanicIsAFailure: Consume and ConsumeTx run the handler
// on a goroutine of their own (the loop leaves it behind should it ignore
// a stop), where a panic nobody recovers would end the process. The docs
// say a handler's panic counts as an error (GroupHandler; GroupTxHandler:
// "An error (or a panic) rolls tx back"): the event is not committed, the
// failure is logged ("group handler failed") with the panic, and the event
// comes again after RetryDelay, before any later event of its partition.
//
// Every event's first delivery panics (ConsumeTx: after writing its
// effect). What a user relies on: the process lives; each event comes
// exactly twice, in offset order; at each delivery the group is committed
// below the event; the panicking run's effect is rolled back (the second
// delivery's transaction sees none), so each effect commits once; each
// panic is logged once as the handler's failure; the group ends with no
// lag, and the loop returns nil once its context is cancelled.
func TestAGroupHandlerPanicIsAFailure(t *testing.T) {
	const events = 6
	eachEngineEachForm(t, []string{"Consume", "ConsumeTx"}, func(t *testing.T, e *engineEnv, form int) {
		c := ctx(t)
		s := e.open(t)
		createEffects(t, s)
		st := s.Stream("panicking")
		g := st.Group("g")
		offs := make([]int64, events)
		for i := range offs {
			off, err := st.Publish(c, []byte("ev"))
			require.NoError(t, err)
			offs[i] = off
		}

		type delivery struct {
			off, committed int64
			effects        int // the event's effects its transaction sees before it writes one (ConsumeTx)
		}
		got := make(chan delivery, 2*events+8)
		seen := map[int64]int{} // the handler's: one runs at a time
		handle := func(ctx context.Context, tx *store.Tx, ev store.Event) error {
			seen[ev.Offset]++
			d := delivery{off: ev.Offset, committed: -1, effects: -1}
			if gs, err := g.Stats(context.WithoutCancel(ctx)); err == nil && len(gs.Assignment) == 1 {
				d.committed = gs.Assignment[0].Committed
			}
			if tx != nil {
				if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM effects WHERE job_id = $1`, ev.Offset).Scan(&d.effects); err != nil {
					return err
				}
				if err := writeEffect(ctx, *tx, ev.Offset); err != nil {
					return err
				}
			}
			got <- d
			if seen[ev.Offset] == 1 {
				panic(fmt.Sprintf("a handler bug at event %d", ev.Offset))
			}
			return nil
		}
		logs := &capturedLogs{}
		opts := store.GroupOpts{Partitions: 1, RetryDelay: 10 * time.Millisecond, Logger: slog.New(logs)}
		wc, stop := context.WithCancel(c)
		defer stop()
		done := make(chan error, 1)
		go func() {
			if form == 0 {
				done <- g.Consume(wc, opts, func(ctx context.Context, ev store.Event) error { return handle(ctx, nil, ev) })
			} else {
				done <- g.ConsumeTx(wc, opts, func(ctx context.Context, tx store.Tx, ev store.Event) error { return handle(ctx, &tx, ev) })
			}
		}()

		for i := range 2 * events {
			var d delivery
			select {
			case d = <-got:
			case <-time.After(30 * time.Second):
				t.Fatalf("delivery %d of %d never came", i+1, 2*events)
			}
			off := offs[i/2]
			require.Equal(t, off, d.off, "delivery %d: each event twice (its first run panicked), in offset order", i+1)
			assert.Less(t, d.committed, off, "delivery %d: the group is committed below the event", i+1)
			if i/2 > 0 {
				assert.GreaterOrEqual(t, d.committed, offs[i/2-1], "delivery %d: the event before it committed", i+1)
			}
			if form == 1 {
				assert.Equal(t, 0, d.effects, "delivery %d: no effect of the event committed (the panicking run's rolled back)", i+1)
			}
		}
		require.Eventually(t, func() bool {
			gs, err := g.Stats(c)
			return err == nil && gs.Lag == 0
		}, 30*time.Second, 10*time.Millisecond, "every event committed")
		stop()
		select {
		case err := <-done:
			assert.NoError(t, err, "the loop returns nil once its context is cancelled")
		case <-time.After(30 * time.Second):
			t.Fatal("the loop has not returned 30 s after its context was cancelled")
		}
		select {
		case d := <-got:
			t.Errorf("event %d was delivered a third time", d.off)
		default:
		}

		failed := logs.matching("group handler failed")
		if assert.Len(t, failed, events, "each panic logged once as the handler's failure") {
			for i, r := range failed {
				assert.Equal(t, fmt.Sprint(offs[i]), r["offset"])
				assert.Contains(t, r["error"], fmt.Sprintf("handler panicked: a handler bug at event %d", offs[i]))
			}
		}
		if form == 1 {
			fx := effects(t, s)
			for _, off := range offs {
				assert.Equal(t, 1, fx[off], "event %d's effect committed once", off)
			}
		}
	})
}
