package tests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Two auto-commit EnqueueManyUnique batches whose keys overlap in opposite
// orders, forced into a lock cycle: an application's transaction holds key
// C; X's batch [A C B] stores A and waits for C; Y's batch [B A] stores B
// and waits for A (X's); the application rolls back, so X stores C and
// waits for B (Y's). PostgreSQL breaks the cycle by failing one of them
// (SQLSTATE 40P01); the batch that failed rolled back whole and goes
// again, so both calls succeed and each key has one job ("concurrent
// enqueuers of one key get one job"). Before, the caller, who opened no
// transaction, got the deadlock error. PostgreSQL only: SQLite's writes
// take turns on one writer, so no batch waits for another's key while
// holding its own.
func TestUniqueBatchesInOppositeOrdersBothSucceed(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	s := e.open(t)
	q := s.Queue("uo")
	c := ctx(t)
	p := e.pool(t)
	lockWaiters := func(n int) {
		t.Helper()
		waitFor(t, "lock waiters", func() bool {
			var k int
			require.NoError(t, p.QueryRow(c, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&k))
			return k >= n
		})
	}
	u := func(payload, key string) store.NewJob {
		return store.NewJob{Payload: []byte(payload), Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: key}}}
	}
	for round := range 3 {
		q := s.Queue(q.Name() + string(rune('a'+round)))
		app, err := s.Begin(c)
		require.NoError(t, err)
		_, err = q.EnqueueUniqueTx(c, app, []byte("app"), store.EnqueueOpts{Unique: store.UniqueOpts{Key: "C"}})
		require.NoError(t, err)
		type result struct {
			placed []store.Enqueued
			err    error
		}
		xc, yc := make(chan result, 1), make(chan result, 1)
		go func() {
			r, err := q.EnqueueManyUnique(c, []store.NewJob{u("xa", "A"), u("xc", "C"), u("xb", "B")})
			xc <- result{r, err}
		}()
		lockWaiters(1)
		go func() {
			r, err := q.EnqueueManyUnique(c, []store.NewJob{u("yb", "B"), u("ya", "A")})
			yc <- result{r, err}
		}()
		lockWaiters(2)
		require.NoError(t, app.Rollback(c))
		x, y := <-xc, <-yc
		require.NoError(t, x.err, "round %d: X [A C B]", round)
		require.NoError(t, y.err, "round %d: Y [B A]", round)
		require.Len(t, x.placed, 3)
		require.Len(t, y.placed, 2)
		assert.Equal(t, x.placed[2].ID, y.placed[0].ID, "round %d: B's job", round)
		assert.Equal(t, x.placed[0].ID, y.placed[1].ID, "round %d: A's job", round)
		added := 0
		for _, r := range append(x.placed, y.placed...) {
			if !r.Duplicate {
				added++
			}
		}
		assert.Equal(t, 3, added, "round %d: one job a key", round)
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 3, st.Ready, "round %d", round)
	}
}
