package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// citusShardingParam is Citus's schema-based sharding setting. With it on,
// any CREATE SCHEMA, even CREATE SCHEMA IF NOT EXISTS on a schema that
// exists (migration 00001), turns the schema into a distributed schema
// placed on a worker.
const citusShardingParam = "citus.enable_schema_based_sharding"

// citusMode is what Open found about Citus in the database.
type citusMode struct {
	version string // the extension's version; empty without Citus
}

// detectCitus tells whether the database has the Citus extension, and
// refuses an alkstore schema Citus has distributed: statements routed
// through the coordinator would record the coordinator's transaction ids
// while their snapshots are taken on the worker, so the settled horizon
// could pass an event that is not yet visible (docs/design/citus.md).
func detectCitus(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (citusMode, error) {
	q := pgdb.New(pool)
	v, err := q.CitusVersion(ctx)
	if err != nil || v == "" {
		return citusMode{}, err
	}
	distributed, err := q.CitusSchemaDistributed(ctx)
	if err != nil {
		return citusMode{}, err
	}
	if distributed {
		return citusMode{}, fmt.Errorf("%w: Citus %s distributes the alkstore schema (schema-based sharding), where stream offsets would not be safe to read in order; "+
			"keep it on the coordinator: where it holds nothing yet (a migration that failed there), DROP SCHEMA alkstore CASCADE and open again (docs/design/citus.md)", errors.ErrUnsupported, v)
	}
	log.Info("alkstore: Citus detected: alkstore's tables are regular tables on the coordinator", "citus", v)
	return citusMode{version: v}, nil
}

// migrationPool is the pool goose migrates through: on Citus, its
// connections keep schema-based sharding off, so that migrating never
// distributes the alkstore schema, whatever the database's setting
// (application schemas created elsewhere are unaffected). The caller closes
// a pool it did not pass in.
func migrationPool(ctx context.Context, pool *pgxpool.Pool, m citusMode) (*pgxpool.Pool, error) {
	if m.version == "" {
		return pool, nil
	}
	cfg := pool.Config()
	cfg.MinConns = 0
	cfg.MaxConns = 2 // goose's session lock, and its migrations
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams[citusShardingParam] = "off"
	return pgxpool.NewWithConfig(ctx, cfg)
}

// citusMarkerLockID serializes Opens creating the commit marker.
const citusMarkerLockID = migrationLockID + 1

// citusCommitMarker prepares the commit marker on Citus (queries/pg/schema.sql,
// "Citus commit marker"): with migrate, creates alkstore.citus_commit_marker
// as a Citus local table unless it is one already. It reports whether the
// marker is ready; without it (WithoutMigrate on a database where no Open
// created it), transactions that write a worker's business rows commit in
// one phase, and Open says so.
func citusCommitMarker(ctx context.Context, pool *pgxpool.Pool, m citusMode, migrate bool, log *slog.Logger) (bool, error) {
	if m.version == "" {
		return false, nil
	}
	if migrate {
		err := pgx.BeginTxFunc(ctx, pool, readCommitted, func(tx pgx.Tx) error {
			q := pgdb.New(tx)
			if err := q.CitusCommitMarkerLock(ctx, citusMarkerLockID); err != nil {
				return err
			}
			if err := q.CitusCommitMarkerCreate(ctx); err != nil {
				return err
			}
			return q.CitusCommitMarkerDistribute(ctx)
		})
		if err != nil {
			return false, fmt.Errorf("create the Citus commit marker: %w", err)
		}
	}
	ready, err := pgdb.New(pool).CitusCommitMarkerReady(ctx)
	if err == nil && !ready {
		log.Warn("alkstore: no Citus commit marker (alkstore.citus_commit_marker; an Open without WithoutMigrate creates it): "+
			"a transaction writing business rows on one worker with its events or jobs commits in one phase, not atomic if the coordinator fails mid-commit",
			"citus", m.version)
	}
	return ready, err
}

// citusMarkingTx is a transaction whose first alkstore statement is
// preceded by CitusMarkCommit, so that Citus commits it in two phases when
// it also wrote a worker's rows (docs/design/citus.md). checkReadOnly: an
// adopted transaction may be read-only, where the marker's write would
// fail (and it has nothing to commit atomically).
type citusMarkingTx struct {
	pgx.Tx
	checkReadOnly bool
	marked        bool
}

func (t *citusMarkingTx) mark(ctx context.Context) error {
	if t.marked {
		return nil
	}
	q := pgdb.New(t.Tx)
	if t.checkReadOnly {
		ro, err := q.CitusTxReadOnly(ctx)
		if err != nil {
			return err
		}
		if ro {
			t.marked = true
			return nil
		}
	}
	if err := q.CitusMarkCommit(ctx); err != nil {
		return err
	}
	t.marked = true
	return nil
}

func (t *citusMarkingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.mark(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *citusMarkingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.mark(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *citusMarkingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.mark(ctx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

// citusCommitErr explains a commit the coordinator failed because a worker
// did ("server closed the connection unexpectedly", SQLSTATE XX000, names
// neither the worker nor the outcome): with the commit marker, Citus was
// preparing the workers' parts, so the transaction rolled back on every
// node.
func citusCommitErr(err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || (pg.Code != "XX000" && !strings.HasPrefix(pg.Code, "08")) {
		return err
	}
	return fmt.Errorf("%w (Citus: a worker this transaction wrote to failed while it committed; the transaction rolled back on every node and may be retried once the worker is back)", err)
}
