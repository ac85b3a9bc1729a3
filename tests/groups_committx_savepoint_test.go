package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A CommitTx of e1 tried behind a savepoint, rolled back to it and made
// again (SAVEPOINT; effect; CommitTx(e1); ROLLBACK TO; effect;
// CommitTx(e1); COMMIT), the README's exactly-once pattern with a retry,
// commits e1's effect once, and the member goes on after e1. Before
// (attack58 F1), the ROLLBACK TO rewound the member to its committed
// offset of the time, the commit of the CommitTx made again only raised
// the committed offset: Recv returned e1 again, its CommitTx in a new
// transaction was accepted, and the ledger held e1 twice.
func TestCommitTxRetriedBehindASavepointCommitsItsEffectsOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, m, offs, e1 := oneMemberAtItsFirstEvent(t, e, "committx-retry", "k", "k", "k")
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			_, err := tx.Exec(c, `CREATE TABLE committx_retry_ledger (event_offset BIGINT NOT NULL)`)
			return err
		}))
		handle := func(ev store.Event, retry bool) {
			require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
				effect := func() error {
					if _, err := tx.Exec(c, `INSERT INTO committx_retry_ledger (event_offset) VALUES ($1)`, ev.Offset); err != nil {
						return err
					}
					return m.CommitTx(c, tx, ev)
				}
				if retry {
					if _, err := tx.Exec(c, "SAVEPOINT try1"); err != nil {
						return err
					}
					if err := effect(); err != nil {
						return err
					}
					if _, err := tx.Exec(c, "ROLLBACK TO SAVEPOINT try1"); err != nil { // a check failed: try again
						return err
					}
				}
				return effect()
			}))
		}
		handle(e1, true)
		for _, want := range offs[1:] {
			ev, err := m.Recv(c)
			require.NoError(t, err)
			require.Equal(t, want, ev.Offset, "the event after the one committed")
			handle(ev, false)
		}
		counts := map[int64]int{}
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			rows, err := tx.Query(c, `SELECT event_offset FROM committx_retry_ledger`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var o int64
				if err := rows.Scan(&o); err != nil {
					return err
				}
				counts[o]++
			}
			return rows.Err()
		}))
		assert.Equal(t, map[int64]int{offs[0]: 1, offs[1]: 1, offs[2]: 1}, counts, "each event's effect once")
	})
}

// A rollback to a savepoint made after CommitTx(e1) undoes only what came
// after it (CommitTx(e1); Recv e2; SAVEPOINT; CommitTx(e2); ROLLBACK TO):
// e1's CommitTx stays in the transaction, so Redeliver(e1) is refused
// while it is open and the member hands out e2 next, in the transaction
// and after its commit. Before (attack58 F1), the rewind of e2's rollback
// went back to the committed offset from before the transaction: Redeliver
// accepted e1 and the next Recv returned e1, committed.
func TestRollbackToAfterCommitTxKeepsTheEarlierCommitTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, m, offs, e1 := oneMemberAtItsFirstEvent(t, e, "committx-batch", "k", "k", "k")
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(c) }()
		require.NoError(t, m.CommitTx(c, tx, e1))
		e2, err := m.Recv(c)
		require.NoError(t, err)
		require.Equal(t, offs[1], e2.Offset)
		_, err = tx.Exec(c, "SAVEPOINT b")
		require.NoError(t, err)
		require.NoError(t, m.CommitTx(c, tx, e2))
		_, err = tx.Exec(c, "ROLLBACK TO SAVEPOINT b") // e2's effects failed
		require.NoError(t, err)
		require.ErrorIs(t, m.Redeliver(e1), store.ErrInvalidArgument, "e1's CommitTx is still in the open transaction")
		again, err := m.Recv(c)
		require.NoError(t, err)
		require.Equal(t, offs[1], again.Offset, "e2, its CommitTx rolled back; not e1")
		require.NoError(t, tx.Commit(c))

		st, err := s.Stream("committx-batch").Group("g").Stats(c)
		require.NoError(t, err)
		require.Equal(t, offs[0], st.Assignment[0].Committed, "e1 committed, e2 not")
		require.NoError(t, m.Redeliver(again), "e2 is not committed")
		next, err := m.Recv(c)
		require.NoError(t, err)
		assert.Equal(t, offs[1], next.Offset, "e2 after the commit of e1")
	})
}

// A model of one member on one partition, many rounds: each transaction
// handles the next event (or two) with CommitTx, savepoints around it
// (rolled back to, released, nested, a CommitTx retried behind one, a
// second event's rolled back), then commits or rolls back. After each
// transaction the member's next Recv is the first event after the offset
// the database committed: never a committed one, never one skipped.
func TestGroupMemberFollowsCommitTxThroughSavepoints(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("committx-model")
		keys := make([]string, 100)
		for i := range keys {
			keys[i] = "k"
		}
		offs := publishBatch(t, st, keys...)
		m, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour, SafetyPoll: time.Hour})
		require.NoError(t, err)
		defer func() { _ = m.Leave(context.Background()) }()
		committed := func() int64 {
			gs, err := st.Group("g").Stats(c)
			require.NoError(t, err)
			return gs.Assignment[0].Committed
		}
		after := func(o int64) int64 {
			for _, x := range offs {
				if x > o {
					return x
				}
			}
			return -1
		}
		recv := func() store.Event {
			rc, cancel := context.WithTimeout(c, time.Minute)
			defer cancel()
			ev, err := m.Recv(rc)
			require.NoError(t, err)
			return ev
		}
		r := rand.New(rand.NewPCG(58, uint64(len(e.name))))
		var trail []string
		for round := 0; ; round++ {
			want := after(committed())
			if want < 0 {
				break
			}
			ev := recv()
			require.Equal(t, want, ev.Offset, "round %d: the first event after the committed offset; last rounds %v", round, trail[max(0, len(trail)-4):])
			tx, err := s.Begin(c)
			require.NoError(t, err)
			var steps []string
			exec := func(q string) {
				_, err := tx.Exec(c, q)
				require.NoError(t, err, q)
				steps = append(steps, q)
			}
			commitTx := func(ev store.Event) {
				require.NoError(t, m.CommitTx(c, tx, ev))
				steps = append(steps, fmt.Sprintf("CommitTx(%d)", ev.Offset))
			}
			second := func() (store.Event, bool) { // the next event, in the transaction
				if after(ev.Offset) < 0 {
					return store.Event{}, false
				}
				ev2 := recv()
				require.Equal(t, after(ev.Offset), ev2.Offset, "round %d: the second of a batch (%v)", round, steps)
				return ev2, true
			}
			switch r.IntN(9) {
			case 0:
				commitTx(ev)
			case 1: // rolled back to a savepoint before
				exec("SAVEPOINT a")
				commitTx(ev)
				exec("ROLLBACK TO a")
			case 2: // released
				exec("SAVEPOINT a")
				commitTx(ev)
				exec("RELEASE a")
			case 3: // retried behind a savepoint
				exec("SAVEPOINT a")
				commitTx(ev)
				exec("ROLLBACK TO a")
				commitTx(ev)
				if r.IntN(2) == 0 {
					exec("RELEASE a")
				}
			case 4: // nested, the inner released, the outer rolled back to, then again
				exec("SAVEPOINT a")
				exec("SAVEPOINT b")
				commitTx(ev)
				exec("RELEASE b")
				exec("ROLLBACK TO a")
				if r.IntN(2) == 0 {
					commitTx(ev)
				}
			case 5: // a batch of two
				commitTx(ev)
				if ev2, ok := second(); ok {
					commitTx(ev2)
				}
			case 6: // a batch of two, the second rolled back to its savepoint
				commitTx(ev)
				if ev2, ok := second(); ok {
					exec("SAVEPOINT b")
					commitTx(ev2)
					exec("ROLLBACK TO b")
					if r.IntN(2) == 0 {
						commitTx(ev2)
					}
				}
			case 7: // a batch of two behind one savepoint, rolled back to
				exec("SAVEPOINT a")
				commitTx(ev)
				if ev2, ok := second(); ok {
					commitTx(ev2)
				}
				exec("ROLLBACK TO a")
			case 8: // a savepoint after, rolled back to
				commitTx(ev)
				exec("SAVEPOINT b")
				exec("ROLLBACK TO b")
			}
			if r.IntN(4) == 0 {
				require.NoError(t, tx.Rollback(c))
				steps = append(steps, "Rollback")
			} else {
				require.NoError(t, tx.Commit(c))
				steps = append(steps, "Commit")
			}
			trail = append(trail, fmt.Sprintf("Recv %d: %v", ev.Offset, steps))
		}
	})
}
