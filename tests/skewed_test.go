package tests

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// skewedNow is the clock of the plan tests' skewed data.
var skewedNow = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// skewedLite is a migrated SQLite database holding loadSkewedQueue's rows,
// loaded once per go test run: under -race SQLite is instrumented Go code,
// and loading 65,000 jobs took over a minute of each plan test's time.
var skewedLite struct {
	once sync.Once
	dir  string // removed by TestMain
	ok   bool
}

// migrateAndLoadSkewedQueue migrates e's database and fills it with
// loadSkewedQueue's rows (at skewedNow). The rows come from a copy of
// skewedLite's file or of the PostgreSQL server's skewed database (copied
// by CREATE DATABASE ... TEMPLATE: loading its 65,000 jobs took each plan
// test seconds): the same rows, loaded the same way, once (on PostgreSQL,
// once a server, when databases can be copied), and never
// analysed, vacuumed or read before the copy, like freshly loaded ones.
func migrateAndLoadSkewedQueue(t *testing.T, e *engineEnv) {
	t.Helper()
	if e.name != "lite" {
		if !e.pg.CopiesDatabases() {
			e.open(t).Close() // migrate
			loadSkewedQueue(t, e, skewedNow)
			return
		}
		skewed := &e.pg.skewed
		skewed.once.Do(func() {
			skewed.ok = t.Run("load the skewed queue once", func(t *testing.T) {
				tmpl := newEnv(t, "pg") // on e's server: a subtest's
				tmpl.open(t).Close()    // migrate
				loadSkewedQueue(t, tmpl, skewedNow)
				skewed.dsn = tmpl.dsn
			}) // its connections are closed now: the database can be copied
		})
		require.True(t, skewed.ok, "loading the skewed queue failed")
		dsn, err := e.pg.NewDatabaseFrom(ctx(t), skewed.dsn)
		require.NoError(t, err)
		e.dsn = dsn
		return
	}
	skewedLite.once.Do(func() {
		dir, err := os.MkdirTemp("", "alkstore-skewed-")
		require.NoError(t, err)
		skewedLite.dir = dir
		skewedLite.ok = t.Run("load the skewed queue once", func(t *testing.T) {
			tmpl := &engineEnv{name: "lite", dsn: filepath.Join(dir, "alk.db")}
			tmpl.open(t).Close() // migrate
			loadSkewedQueue(t, tmpl, skewedNow)
		}) // its connections are closed now: the file holds every row
	})
	require.True(t, skewedLite.ok, "loading the skewed queue failed")
	copySQLite(t, filepath.Join(skewedLite.dir, "alk.db"), e.dsn)
}

// removeSkewedLite removes skewedLite's file, if a test made it.
func removeSkewedLite() {
	if skewedLite.dir != "" {
		_ = os.RemoveAll(skewedLite.dir)
	}
}
