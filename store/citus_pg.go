package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
