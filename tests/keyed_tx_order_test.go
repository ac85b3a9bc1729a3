package tests

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestKeyedPublishesInOneTxTakeKeyOrder: on PostgreSQL a keyed publish
// locks its key's head row until its transaction ends, so two
// transactions each publishing keys a and b, one a then b and the other b
// then a, deadlock (40P01, as the README says), and in one order (a then
// b in both) the second waits for the first and both commit. The
// interleaving is forced: the second publish of one transaction starts
// only once the other's waits for a lock. SQLite runs one writing
// transaction at a time: no interleaving to test there.
func TestKeyedPublishesInOneTxTakeKeyOrder(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	admin := e.pool(t)
	// The deadlock check runs after deadlock_timeout (1 s) of waiting; a
	// superuser may shorten it (not every ALK_PG_DSN role is one).
	_, _ = admin.Exec(c, "ALTER DATABASE "+pgx.Identifier{admin.Config().ConnConfig.Database}.Sanitize()+
		" SET deadlock_timeout = '100ms'")
	s := e.open(t)
	st := s.Stream("pairs")
	for _, k := range []string{"a", "b"} { // the heads exist: the publishes update them
		_, err := st.PublishWithKey(c, k, []byte("0"))
		require.NoError(t, err)
	}

	begin := func() store.Tx {
		tx, err := s.Begin(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}
	publish := func(tx store.Tx, key string) error {
		_, err := st.PublishWithKeyTx(c, tx, key, []byte("x"))
		return err
	}
	deadlocked := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "40P01"
	}

	// a, b against b, a: tx1 waits for tx2 at b, then tx2 for tx1 at a.
	tx1, tx2 := begin(), begin()
	require.NoError(t, publish(tx1, "a"))
	require.NoError(t, publish(tx2, "b"))
	done1 := make(chan error, 1)
	go func() { done1 <- errors.Join(publish(tx1, "b"), tx1.Commit(c)) }()
	waitForLockWait(t, admin, "tx1 publishing b")
	err2 := publish(tx2, "a")
	if err2 != nil {
		_ = tx2.Rollback(c)
	} else {
		err2 = tx2.Commit(c)
	}
	err1 := <-done1
	require.True(t, deadlocked(err1) != deadlocked(err2), "one of the two deadlocks: %v; %v", err1, err2)
	require.True(t, err1 == nil || err2 == nil, "the other commits: %v; %v", err1, err2)

	// a, b against a, b: tx2 waits for tx1 at a, and goes on when tx1 ends.
	tx1, tx2 = begin(), begin()
	require.NoError(t, publish(tx1, "a"))
	done2 := make(chan error, 1)
	go func() { done2 <- errors.Join(publish(tx2, "a"), publish(tx2, "b"), tx2.Commit(c)) }()
	waitForLockWait(t, admin, "tx2 publishing a")
	require.NoError(t, errors.Join(publish(tx1, "b"), tx1.Commit(c)))
	require.NoError(t, <-done2)
}
