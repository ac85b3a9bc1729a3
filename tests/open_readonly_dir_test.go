package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestOpenSaysTheDirectoryIsNotWritable: a SQLite database whose file is
// writable but whose directory is not (copied into a read-only mount,
// a directory of another user) cannot run in WAL mode: SQLite cannot
// create its -wal and -shm files. Open says so, naming the file and the
// directory, and wraps SQLite's error. Before it said only "alkstore:
// open: sqlite3: invalid _pragma: sqlite3: attempt to write a readonly
// database" (attack60b F1). SQLite only: the files are SQLite's.
//
// Tests run as root here, and root ignores a directory's permission bits:
// as root the directory is made immutable (chattr +i, which binds root
// too: creating a file in it fails with "operation not permitted"), as
// anyone else it is chmod 0555, as the attacker had it.
func TestOpenSaysTheDirectoryIsNotWritable(t *testing.T) {
	parallelTest(t)
	c := ctx(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.db")
	s, err := store.Open(c, path)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	for _, side := range []string{"-wal", "-shm"} {
		if err := os.Remove(path + side); !os.IsNotExist(err) {
			require.NoError(t, err)
		}
	}
	lockDir(t, dir)
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		f.Close()
		t.Fatalf("the directory is still writable (%s)", f.Name())
	}

	for _, dsn := range []string{path, "sqlite:" + path, "file:" + path + "?cache=private"} {
		_, err := store.Open(c, dsn)
		require.Error(t, err, dsn)
		msg := err.Error()
		assert.Contains(t, msg, `alkstore: open "`+path+`": the directory "`+dir+`" is not writable (`, dsn)
		assert.Contains(t, msg, "SQLite's WAL mode needs to create s.db-wal and s.db-shm beside the database", dsn)
		assert.Contains(t, msg, "attempt to write a readonly database", "SQLite's own error is kept: %s", dsn)
		assert.ErrorIs(t, err, sqlite3.READONLY, dsn)
		assert.NotErrorIs(t, err, store.ErrInvalidArgument, "the DSN is not at fault: %s", dsn)
		_, err = store.Open(c, dsn, store.WithoutMigrate())
		require.Error(t, err, dsn)
		assert.Contains(t, err.Error(), `the directory "`+dir+`" is not writable`, "WithoutMigrate: %s", dsn)
	}
	_, err = os.Stat(path + "-wal")
	assert.True(t, os.IsNotExist(err), "nothing was created beside the database")
}

// lockDir makes dir unwritable for the test's process until the test ends.
func lockDir(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(dir, 0o555))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		return
	}
	out, err := exec.Command("chattr", "+i", dir).CombinedOutput()
	require.NoError(t, err, "root ignores permission bits; the directory must be made immutable: %s", strings.TrimSpace(string(out)))
	t.Cleanup(func() {
		if out, err := exec.Command("chattr", "-i", dir).CombinedOutput(); err != nil {
			t.Errorf("chattr -i %s: %v: %s", dir, err, out)
		}
	})
}
