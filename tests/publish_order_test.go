package tests

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestPublishHoldsItsTransactionIDBeforeDrawingItsOffset: the settled
// horizon rests on every publish taking its transaction id before nextval
// draws its offset (stream-horizon.md): a snapshot that shows a transaction
// id as finished then also covers every offset that transaction drew. A
// transaction holds the offset sequence's lock (ALTER SEQUENCE, rolled back
// after), so each publish form stops in nextval; while it waits, its
// backend must already hold the id its event then carries. Each form is
// forced into that wait; none is timed (pg only: SQLite keeps no
// transaction ids and has no horizon).
func TestPublishHoldsItsTransactionIDBeforeDrawingItsOffset(t *testing.T) {
	e := newEnv(t, "pg")
	s := e.open(t)
	raw := e.pool(t)
	st := s.Stream("xid-first")
	payload := []byte("p")
	forms := []struct {
		name    string
		publish func(context.Context) (int64, error)
	}{
		{"Publish", func(c context.Context) (int64, error) { return st.Publish(c, payload) }},
		{"PublishWithKey", func(c context.Context) (int64, error) { return st.PublishWithKey(c, "k", payload) }},
		{"PublishMessage with headers", func(c context.Context) (int64, error) {
			return st.PublishMessage(c, store.Message{Payload: payload, Headers: map[string]string{"h": "v"}})
		}},
		{"PublishMany", func(c context.Context) (int64, error) {
			offs, err := st.PublishMany(c, []store.Message{{Payload: payload}, {Payload: payload}})
			if err != nil {
				return 0, err
			}
			return offs[0], nil
		}},
	}
	for _, f := range forms {
		locker, err := raw.Begin(ctx(t))
		require.NoError(t, err)
		// On a failure, before the pool closes.
		t.Cleanup(func() { _ = locker.Rollback(context.Background()) })
		// The sequence's lock, until the rollback (CACHE 1 is what it has).
		_, err = locker.Exec(ctx(t), `ALTER SEQUENCE alkstore.event_offset_seq CACHE 1`)
		require.NoError(t, err)

		type result struct {
			off int64
			err error
		}
		done := make(chan result, 1)
		go func() {
			off, err := f.publish(ctx(t))
			done <- result{off, err}
		}()
		xid := waitInNextval(t, raw, f.name)
		require.NoError(t, locker.Rollback(ctx(t)))
		got := <-done
		require.NoError(t, got.err, f.name)

		require.NotEmpty(t, xid, "%s: waited for its offset without a transaction id", f.name)
		var txid string
		require.NoError(t, raw.QueryRow(ctx(t), `SELECT txid::text FROM alkstore.events WHERE id = $1`, got.off).Scan(&txid))
		full, err := strconv.ParseUint(txid, 10, 64)
		require.NoError(t, err)
		assert.Equal(t, xid, strconv.FormatUint(full&0xffffffff, 10),
			"%s: the id it held while it waited for its offset is its event's transaction id", f.name)
	}
}

// waitInNextval waits until a backend of the database waits for the offset
// sequence's lock and returns its transaction id ("" when it has none).
func waitInNextval(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, what string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a hang detector, not a bound: the wait is forced
	for {
		var pid int32
		err := pool.QueryRow(ctx(t), `SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND l.relation = 'alkstore.event_offset_seq'::regclass AND a.datname = current_database()
			  AND a.query LIKE '%INSERT INTO alkstore.events%'`).Scan(&pid)
		if err == nil {
			// Its id is read by a statement of its own, which starts after
			// the wait was seen: within one statement pg_stat_activity may
			// be read before pg_locks, from a moment before the id existed.
			var xid *string
			require.NoError(t, pool.QueryRow(ctx(t), `SELECT backend_xid::text FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&xid))
			if xid == nil {
				return ""
			}
			return *xid
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		if time.Now().After(deadline) {
			t.Fatalf("%s never waited for the offset sequence", what)
		}
		time.Sleep(time.Millisecond)
	}
}
