package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestATxWhoseCommitFailsStoresNothingAndTheStoreGoesOn: a transaction
// whose COMMIT the database refuses (an application's foreign key checked
// at COMMIT, broken) stores nothing, neither the application's rows nor
// the job and event the store wrote in it, through Begin and through InTx;
// and the store is left out of it: its next transactions and auto-commit
// writes commit, and its readers see them. On SQLite the writer connection
// runs COMMIT as a statement it keeps prepared, and rolls back after a
// COMMIT that failed with the transaction still open: a connection left
// inside it would run every later auto-commit write in that transaction,
// where no reader sees it and no Begin can start.
func TestATxWhoseCommitFailsStoresNothingAndTheStoreGoesOn(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		dsn := e.dsn
		if e.name == "lite" {
			dsn = "file:" + e.dsn + "?_pragma=foreign_keys(1)" // SQLite checks foreign keys only when asked
		}
		c := ctx(t)
		s, err := store.Open(c, dsn)
		require.NoError(t, err)
		defer s.Close()
		q := s.Queue("commit-fails")
		st := s.Stream("commit-fails")
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			if _, err := tx.Exec(c, `CREATE TABLE cf_parent (id bigint PRIMARY KEY)`); err != nil {
				return err
			}
			_, err := tx.Exec(c, `CREATE TABLE cf_child (id bigint PRIMARY KEY,
				parent bigint REFERENCES cf_parent (id) DEFERRABLE INITIALLY DEFERRED)`)
			return err
		}))
		rows := func() (n int64) {
			require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
				return tx.QueryRow(c, `SELECT (SELECT count(*) FROM cf_parent) + (SELECT count(*) FROM cf_child)`).Scan(&n)
			}))
			return n
		}
		// writes the store's job and event and the application's rows;
		// parent 0 breaks the key (checked at COMMIT).
		write := func(c context.Context, tx store.Tx, id, parent int64) (job, offset int64) {
			job, err := q.EnqueueTx(c, tx, []byte("job"), store.EnqueueOpts{})
			require.NoError(t, err)
			offset, err = st.PublishTx(c, tx, []byte("event"))
			require.NoError(t, err)
			_, err = tx.Exec(c, `INSERT INTO cf_parent (id) VALUES ($1)`, id)
			require.NoError(t, err)
			_, err = tx.Exec(c, `INSERT INTO cf_child (id, parent) VALUES ($1, $2)`, id, parent)
			require.NoError(t, err, "the key is checked at COMMIT")
			return job, offset
		}
		refused := func(err error) {
			t.Helper()
			require.Error(t, err)
			assert.Contains(t, strings.ToLower(err.Error()), "foreign key")
		}
		var last int64 // the last offset committed
		gone := func(job int64) {
			t.Helper()
			_, err := q.Job(c, job)
			require.ErrorIs(t, err, store.ErrNotFound, "the failed commit's job")
			evs, err := st.ReadSince(c, last, 1000)
			require.NoError(t, err)
			assert.Empty(t, evs, "the failed commit's event")
			assert.Zero(t, rows(), "the failed commit's rows")
		}
		var kept []int64
		for round := range int64(3) {
			// Begin, Commit.
			tx, err := s.Begin(c)
			require.NoError(t, err)
			job, _ := write(c, tx, 10+round, 0)
			refused(tx.Commit(c))
			gone(job)

			// InTx.
			var inJob int64
			refused(s.InTx(c, func(c context.Context, tx store.Tx) error {
				inJob, _ = write(c, tx, 20+round, 0)
				return nil
			}))
			gone(inJob)

			// The store goes on: an auto-commit write its readers see...
			id, err := q.Enqueue(c, []byte("after"), store.EnqueueOpts{})
			require.NoError(t, err)
			got, err := q.Job(c, id)
			require.NoError(t, err, "an auto-commit enqueue after the failed commit is stored")
			assert.Equal(t, []byte("after"), got.Payload)
			kept = append(kept, id)
			// ...and a transaction that commits.
			var off int64
			require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
				var j int64
				j, off = write(c, tx, 30+round, 30+round)
				kept = append(kept, j)
				return nil
			}))
			assert.Equal(t, int64(2), rows())
			pub, err := st.Publish(c, []byte("after"))
			require.NoError(t, err)
			evs, err := st.ReadSince(c, last, 1000)
			require.NoError(t, err)
			assert.Equal(t, []int64{off, pub}, offsets(evs), "the events committed after the failed commit")
			last = pub
			// Empty again for the next round's checks.
			require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
				_, err := tx.Exec(c, `DELETE FROM cf_child`)
				if err == nil {
					_, err = tx.Exec(c, `DELETE FROM cf_parent`)
				}
				return err
			}))
		}
		for _, id := range kept {
			_, err := q.Job(c, id)
			require.NoError(t, err, "job %d", id)
		}
	})
}
