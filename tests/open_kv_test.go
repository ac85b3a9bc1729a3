package tests

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestOpenKeyValueDSN: Open takes pgx's key=value DSNs ("host=/tmp
// port=5432 dbname=x user=y") as pgx does, and a malformed one fails with
// ErrInvalidArgument without showing its password, even where pgx's own
// redaction misses it (spaces around '='). A SQLite path with '=' in it
// still opens SQLite.
func TestOpenKeyValueDSN(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		if e.name == "lite" {
			s, err := store.Open(c, filepath.Join(t.TempDir(), "a=b.db"))
			require.NoError(t, err)
			defer s.Close()
			assert.Equal(t, "lite", s.Engine())
			return
		}
		cfg, err := pgconn.ParseConfig(e.dsn)
		require.NoError(t, err)
		kv := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
		s, err := store.Open(c, kv)
		require.NoError(t, err, kv)
		defer s.Close()
		assert.Equal(t, "pg", s.Engine())
		_, err = s.Queue("kv").Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		const pw = "s3cr3t-Pa55word"
		for _, dsn := range []string{
			"host=/nonexistent-alkstore-dir port=1 user=u password=" + pw + " dbname=x connect_timeout=1",
			"host=/nonexistent-alkstore-dir password = " + pw + " dbname=x not-a-pair",
			"host=/nonexistent-alkstore-dir password = '" + pw + "' port=notaport",
			"password =" + pw + " host='unterminated",
		} {
			_, err := store.Open(c, dsn)
			require.Error(t, err, dsn)
			assert.NotContains(t, err.Error(), pw, dsn)
			assert.Contains(t, err.Error(), "alkstore: open")
		}
	})
}
