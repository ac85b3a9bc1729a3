package alktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dsnform "github.com/alkstore/alkstore/internal/dsn"
	"github.com/alkstore/alkstore/store"
)

// NewStore opens a store of the test's own, empty and migrated, and closes
// and removes it when the test ends (tb.Cleanup). With dsn "" it is a
// SQLite file in tb.TempDir(). Otherwise dsn is a PostgreSQL server's DSN,
// as Open takes it, whose role may create databases: NewStore creates a
// fresh database there (alktest_ and a random suffix), opens the store on
// it, and drops it (WITH (FORCE)) at cleanup, so tests may run in parallel
// on one server without seeing each other's rows. (A schema per test is not
// possible: alkstore's tables live in the fixed schema alkstore.)
//
// A common pattern is one DSN from the environment, SQLite when it is
// unset:
//
//	s := alktest.NewStore(t, os.Getenv("TEST_PG_DSN"))
func NewStore(tb testing.TB, dsn string, opts ...store.Option) *store.Store {
	tb.Helper()
	ctx := context.Background()
	if dsn == "" {
		s, err := store.Open(ctx, filepath.Join(tb.TempDir(), "alkstore.db"), opts...)
		if err != nil {
			tb.Fatalf("alktest: %v", err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		return s
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") && !strings.Contains(dsn, "=") {
		tb.Fatalf("alktest: NewStore takes \"\" (a SQLite file of the test's own) or a PostgreSQL DSN")
	}
	name, err := newDatabase(ctx, dsn)
	if err != nil {
		tb.Fatalf("alktest: create a database for the test: %v", err)
	}
	drop := func() {
		if err := dropDatabase(context.Background(), dsn, name); err != nil {
			tb.Errorf("alktest: drop the test's database %s: %v", name, err)
		}
	}
	s, err := store.Open(ctx, withDatabase(dsn, name), opts...)
	if err != nil {
		drop()
		tb.Fatalf("alktest: %v", err)
	}
	tb.Cleanup(func() {
		_ = s.Close()
		drop()
	})
	return s
}

// newDatabase creates an empty database on dsn's server and returns its
// name. (DDL on a name cannot be a parameterized statement in queries/;
// the name is drawn here and quoted.)
func newDatabase(ctx context.Context, dsn string) (string, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "alktest_" + time.Now().UTC().Format("20060102") + "_" + hex.EncodeToString(b[:])
	conn, err := connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0")
	return name, err
}

func dropDatabase(ctx context.Context, dsn, name string) error {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// connect opens one connection on dsn as Open reads it: its pool_*
// settings (pool_max_conns, …) are the pool's, not the server's
// (pgx.Connect sent them, and the server refused).
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := dsnform.ConnConfig(dsn)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// withDatabase is dsn naming database name instead of its own.
func withDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return strings.TrimSpace(dsn) + " dbname=" + name
}
