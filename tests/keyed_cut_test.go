package tests

import (
	"context"
	"testing"

	"github.com/ncruces/go-sqlite3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestKeyedPublishCutShortStoresNothing: an auto-commit keyed publish whose
// context ends in the middle of its head's write (an application's slow
// trigger on the heads table) returns the context's error naming the
// operation, stores neither its event nor its head, and leaves the store's
// writer free and outside any transaction: the publishes after it commit,
// and the key takes its next value. On SQLite the publish runs in
// litedriver.WriteTx's transaction, outside database/sql's.
func TestKeyedPublishCutShortStoresNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		_, cut := slowStatements(t, e) // also the pg trigger function test_slow_job
		if e.name == "lite" {
			const spin = `SELECT 'slow' FROM (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 50000000) SELECT i FROM c)`
			e.execSQL(t, `CREATE TRIGGER test_slow_head AFTER INSERT ON alk_compaction_heads WHEN NEW.key = 'slow' BEGIN `+spin+`; END`)
		} else {
			e.execSQL(t, `CREATE TRIGGER test_slow_head BEFORE INSERT ON alkstore.compaction_heads
				FOR EACH ROW WHEN (NEW.key = 'slow') EXECUTE FUNCTION public.test_slow_job()`)
		}
		st := s.Stream("cut")
		first, err := st.PublishWithKey(c, "ok", []byte("before"))
		require.NoError(t, err)

		for _, why := range []error{context.DeadlineExceeded, context.Canceled} {
			_, err = st.PublishWithKey(cut(why), "slow", []byte(why.Error()))
			require.Error(t, err)
			require.ErrorIs(t, err, why, "the context's error")
			if e.name == "lite" { // SQLite stopped the statement, not database/sql before it began
				assert.ErrorIs(t, err, sqlite3.INTERRUPT)
			}
			assert.NotErrorIs(t, err, store.ErrTxDone, "no transaction of the caller's")
			assert.Contains(t, err.Error(), `alkstore: publish "cut": `)
		}

		evs, err := st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		require.Len(t, evs, 1, "only the event published before: %+v", evs)
		assert.Equal(t, first, evs[0].Offset)
		_, err = st.Key("slow").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound)

		if e.name == "pg" {
			e.execSQL(t, `DROP TRIGGER test_slow_head ON alkstore.compaction_heads`)
		} else {
			e.execSQL(t, `DROP TRIGGER test_slow_head`)
		}
		off, err := st.PublishWithKey(c, "slow", []byte("after"))
		require.NoError(t, err)
		plain, err := st.Publish(c, []byte("plain"))
		require.NoError(t, err)
		assert.Greater(t, plain, off)
		h, err := st.Key("slow").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, off, h.Offset)
		assert.Equal(t, []byte("after"), h.Payload)
		evs, err = st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		assert.Len(t, evs, 3)
	})
}
