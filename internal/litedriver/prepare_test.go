package litedriver_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// TestPrepareOnFirstRun: a statement prepared with PrepareOnFirstRun's
// context is parsed on its first run, so its prepare succeeds on a table
// made only later, where a plain prepare fails; it runs as a prepared
// statement, in a transaction too, its first run's arguments converted by
// the driver's rules (json.RawMessage is not []byte); one that cannot be
// parsed fails every run, and one never run closes.
func TestPrepareOnFirstRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := litedriver.Open("file:" + filepath.Join(t.TempDir(), "p.db") + "?_pragma=journal_mode(wal)&_txlock=immediate")
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)

	_, err = db.PrepareContext(ctx, "INSERT INTO later (v) VALUES (?) RETURNING id")
	require.ErrorContains(t, err, "no such table", "a plain prepare parses at once")
	lazy := litedriver.PrepareOnFirstRun(ctx)
	insert, err := db.PrepareContext(lazy, "INSERT INTO later (v) VALUES (?) RETURNING id")
	require.NoError(t, err)
	defer insert.Close()
	read, err := db.PrepareContext(lazy, "SELECT v FROM later WHERE id = ?")
	require.NoError(t, err)
	defer read.Close()
	bad, err := db.PrepareContext(lazy, "SELECT nope FROM later")
	require.NoError(t, err)
	defer bad.Close()
	never, err := db.PrepareContext(lazy, "SELECT nothing FROM nowhere")
	require.NoError(t, err)
	require.NoError(t, never.Close())

	_, err = db.ExecContext(ctx, "CREATE TABLE later (id INTEGER PRIMARY KEY, v BLOB)")
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	var id int64
	require.NoError(t, tx.StmtContext(ctx, insert).QueryRowContext(ctx, json.RawMessage(`{"a":1}`)).Scan(&id))
	require.NoError(t, tx.Commit())
	for range 2 {
		var v []byte
		require.NoError(t, read.QueryRowContext(ctx, id).Scan(&v))
		require.JSONEq(t, `{"a":1}`, string(v))
		_, err = bad.QueryContext(ctx)
		require.ErrorContains(t, err, "no such column")
	}
}
