package store

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/syncbuf"
)

// syncBuffer is a bytes.Buffer safe for the store's goroutines to log to.
type syncBuffer = syncbuf.Buffer

// On Linux the SQLite change watcher is nudged by writes to the database's
// WAL file (inotify) instead of polling every 16 ms while idle: the WAL
// path it watches is the store's own.
func TestLiteWatcherWatchesTheWAL(t *testing.T) {
	ctx := context.Background()
	var logs syncBuffer
	path := filepath.Join(t.TempDir(), "watched.db")
	s, err := Open(ctx, path, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Stream("events").Subscribe(ctx, "c", SubscribeOpts{})
	require.NoError(t, err)
	defer r.Close()
	assert.Contains(t, logs.String(), "polls when the WAL file is written (inotify)")
	assert.Contains(t, logs.String(), "wal="+path+"-wal")
}
