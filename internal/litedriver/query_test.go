package litedriver_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// TestQueryReadsOnAPoolConnection: litedriver.Query (the stream pages'
// read on the reader pool, outside any transaction) reads a statement's
// rows with their arguments bound; ends when its context ends while it
// runs (the error matches the context's), or when the handle's
// Interrupter interrupts it (ErrInterrupted); and leaves no read open
// whatever ends it (its row function's error included): a TRUNCATE
// checkpoint, which a reader's open snapshot blocks, then completes. The
// connection reads again after each.
func TestQueryReadsOnAPoolConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "query.db")
	name := "file:" + path + "?_pragma=journal_mode(wal)&_pragma=busy_timeout(10000)"
	writer, err := litedriver.Open(name + "&_txlock=immediate")
	require.NoError(t, err)
	defer writer.Close()
	writer.SetMaxOpenConns(1)
	stops := &litedriver.Interrupter{}
	readers, err := litedriver.OpenInterruptible(name+"&_pragma=query_only(1)", stops)
	require.NoError(t, err)
	defer readers.Close()
	readers.SetMaxOpenConns(1) // every Query on the same connection
	_, err = writer.ExecContext(ctx, "CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v BLOB)")
	require.NoError(t, err)
	for i := range 20 {
		var k any
		if i%2 == 0 {
			k = "k"
		}
		_, err = writer.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (?, ?)", k, []byte{byte(i)})
		require.NoError(t, err)
	}
	const page = "SELECT id, k, v FROM t WHERE id > ? ORDER BY id LIMIT ?"
	read := func(after, lim int64) (ids []int64, err error) {
		err = litedriver.Query(ctx, readers, page, func(r *litedriver.Row) error {
			id := r.Int64(0)
			if k := r.Text(1); (k == nil) != (id%2 == 0) || r.Blob(2)[0] != byte(id-1) {
				t.Fatalf("row %d: key %q, value %v", id, k, r.Blob(2))
			}
			ids = append(ids, id)
			return nil
		}, after, lim)
		return ids, err
	}
	ids, err := read(5, 3)
	require.NoError(t, err)
	require.Equal(t, []int64{6, 7, 8}, ids)

	// No read stays open, however the read ended.
	noReadOpen := func(what string) {
		t.Helper()
		_, err := writer.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (NULL, x'00')")
		require.NoError(t, err)
		var busy, logged, done int
		require.NoError(t, writer.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &done))
		require.Zero(t, busy, "%s: a read stayed open on the reader and blocked the checkpoint", what)
		_, err = writer.ExecContext(ctx, "DELETE FROM t WHERE id > 20")
		require.NoError(t, err)
		ids, err := read(18, 5)
		require.NoError(t, err, what)
		require.Equal(t, []int64{19, 20}, ids, what)
	}
	noReadOpen("a read to its end")

	stop := errors.New("enough")
	rows := 0
	err = litedriver.Query(ctx, readers, page, func(*litedriver.Row) error { rows++; return stop }, int64(0), int64(10))
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, rows)
	noReadOpen("a read its row function ended")

	const long = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000000) SELECT i FROM n"
	inner, cut := context.WithCancel(ctx)
	z := &armedCut{progressCut: progressCut{Context: inner, cancel: cut}}
	rows = 0
	err = litedriver.Query(z, readers, long, func(*litedriver.Row) error {
		rows++
		z.armed.Store(true) // the cut comes while the read runs, not before
		return nil
	})
	cut()
	require.True(t, z.ended.Load(), "no progress look ended the read: the test shows nothing")
	require.ErrorIs(t, err, context.Canceled, "the read ran to its end (%d rows) with its context ended", rows)
	require.Less(t, rows, 10000000)
	noReadOpen("a read its context ended")

	ended, endNow := context.WithCancel(ctx)
	endNow()
	_, err = read(0, 1)
	require.NoError(t, err)
	err = litedriver.Query(ended, readers, page, func(*litedriver.Row) error { return nil }, int64(0), int64(1))
	require.ErrorIs(t, err, context.Canceled, "a read whose context ended before it")

	ran := make(chan error, 1)
	go func() {
		ran <- litedriver.Query(context.Background(), readers,
			"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT count(*) FROM c", func(*litedriver.Row) error { return nil })
	}()
	waitStack(t, "TestQueryReadsOnAPoolConnection", "(*Stmt).Step")
	stops.Interrupt()
	require.ErrorIs(t, within(t, ran), litedriver.ErrInterrupted, "the running read")
}
