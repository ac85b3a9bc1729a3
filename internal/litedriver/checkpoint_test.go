package litedriver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// TestReturningWritesCheckpoint: single-row writes read with QueryRow (an
// INSERT ... RETURNING, as every :one write of the store is) keep the WAL
// near SQLite's auto-checkpoint size (1,000 pages) like plain Execs do.
// SQLite runs its auto-checkpoint only when a statement steps to its end,
// and QueryRow resets the statement after the first row, so without the
// driver stepping write statements to their end the WAL grew by every
// commit, without bound (a gigabyte in a 40-second publish burst).
func TestReturningWritesCheckpoint(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "wal.db")
	db, err := litedriver.Open("file:" + path + "?_pragma=journal_mode(wal)&_pragma=synchronous(normal)")
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, `CREATE TABLE ev (id INTEGER PRIMARY KEY AUTOINCREMENT, stream TEXT NOT NULL, payload BLOB);
		CREATE INDEX ev_stream ON ev (stream, id)`)
	require.NoError(t, err)
	ins, err := db.PrepareContext(ctx, `INSERT INTO ev (stream, payload) VALUES (?, ?) RETURNING id`)
	require.NoError(t, err)
	defer ins.Close()

	payload := make([]byte, 128)
	for i := range 6000 { // three frames or more a commit: 18,000 frames, 70 MB of WAL unchecked
		var id int64
		require.NoError(t, ins.QueryRowContext(ctx, "s", payload).Scan(&id))
		require.EqualValues(t, i+1, id)
	}
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	// 1,000 pages of 4 KiB and the frames of the commit that crossed it,
	// with room to spare: far below what every commit appended adds up to.
	require.Less(t, fi.Size(), int64(8<<20), "the WAL grew past its auto-checkpoint size")
}
