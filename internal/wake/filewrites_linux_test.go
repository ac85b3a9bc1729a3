package wake

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A write to the file through another descriptor (as by another process)
// nudges a watcher that would otherwise not poll for an hour.
func TestFileWritesNudgeTheWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.db-wal")
	require.NoError(t, os.WriteFile(path, make([]byte, 32), 0o600))
	writes, stop, err := FileWrites(path)
	require.NoError(t, err)
	defer stop()

	hub := &Hub{}
	sub := hub.Subscribe("s:events")
	defer sub.Close()
	var version atomic.Int64
	w := StartWatcher(hub, func(context.Context) (int64, error) { return version.Load(), nil },
		Polling{Fastest: time.Hour, Slowest: time.Hour, Nudge: writes})
	defer w.Close()

	version.Add(1) // the commit, visible by the time its write nudges
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("a WAL frame"), 32)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	select {
	case <-sub.C():
	case <-time.After(10 * time.Second):
		t.Fatal("no wake after another descriptor wrote the file")
	}
}
