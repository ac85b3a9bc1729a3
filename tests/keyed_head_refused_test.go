package tests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// refuseHeadsOf makes the heads table refuse any write of key's row (an
// application's trigger raising an error), so a keyed publish of key fails
// at its head write, after its event was inserted.
func refuseHeadsOf(t *testing.T, e *engineEnv, key string) {
	t.Helper()
	if e.name == "pg" {
		e.execSQL(t, `CREATE FUNCTION public.test_refuse_head() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.key = '`+key+`' THEN RAISE EXCEPTION 'test: head refused'; END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER test_refuse_head BEFORE INSERT OR UPDATE ON alkstore.compaction_heads
				FOR EACH ROW EXECUTE FUNCTION public.test_refuse_head()`)
		return
	}
	e.execSQL(t, `CREATE TRIGGER test_refuse_head_insert BEFORE INSERT ON alk_compaction_heads WHEN NEW.key = '`+key+`'
			BEGIN SELECT RAISE(ABORT, 'test: head refused'); END`,
		`CREATE TRIGGER test_refuse_head_update BEFORE UPDATE ON alk_compaction_heads WHEN NEW.key = '`+key+`'
			BEGIN SELECT RAISE(ABORT, 'test: head refused'); END`)
}

// TestKeyedPublishWhoseHeadFailsLeavesNoEvent: a keyed publish is the event
// and its head, all or none, in every form, inside a transaction too: when
// the head write fails, the publish fails and its event is not stored, even
// when the caller goes on to commit the transaction (on SQLite a failed
// statement leaves the transaction open; on PostgreSQL it aborts it, and
// the commit rolls back). SQLite's keyed PublishTx was two statements
// without a savepoint, so the event stayed, without a head, and the commit
// stored it (found by keyed3, stop 36).
func TestKeyedPublishWhoseHeadFailsLeavesNoEvent(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("refused")
		first, err := st.PublishWithKey(c, "ok", []byte("before"))
		require.NoError(t, err)
		refuseHeadsOf(t, e, "bad")

		_, err = st.PublishWithKey(c, "bad", []byte("auto-commit"))
		require.ErrorContains(t, err, "test: head refused")

		for _, form := range []string{"PublishWithKeyTx", "PublishMessageTx", "PublishManyTx of one", "topic PublishTx"} {
			tx, err := s.Begin(c)
			require.NoError(t, err)
			switch form {
			case "PublishWithKeyTx":
				_, err = st.PublishWithKeyTx(c, tx, "bad", []byte(form))
			case "PublishMessageTx":
				key := "bad"
				_, err = st.PublishMessageTx(c, tx, store.Message{Key: &key, Payload: []byte(form), Headers: map[string]string{"h": "v"}})
			case "PublishManyTx of one":
				key := "bad"
				_, err = st.PublishManyTx(c, tx, []store.Message{{Key: &key, Payload: []byte(form)}})
			case "topic PublishTx":
				_, err = s.Topic[string]("refused").PublishTx(c, tx, &form, store.PublishOpts{Key: "bad", Rank: 3})
			}
			require.ErrorContains(t, err, "test: head refused", form)
			_ = tx.Commit(c) // PostgreSQL: the transaction was aborted, and this rolls it back
		}

		evs, err := st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		require.Len(t, evs, 1, "only the event published before the trigger: %+v", evs)
		assert.Equal(t, first, evs[0].Offset)
		_, err = st.Key("bad").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound)

		// The key takes values once its head may be written.
		if e.name == "pg" {
			e.execSQL(t, `DROP TRIGGER test_refuse_head ON alkstore.compaction_heads`)
		} else {
			e.execSQL(t, `DROP TRIGGER test_refuse_head_insert`, `DROP TRIGGER test_refuse_head_update`)
		}
		off, err := st.PublishWithKey(c, "bad", []byte("after"))
		require.NoError(t, err)
		h, err := st.Key("bad").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, off, h.Offset)
		assert.Equal(t, []byte("after"), h.Payload)
	})
}
