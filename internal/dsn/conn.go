package dsn

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConnConfig is the settings of one connection to PostgreSQL DSN d, read
// as store.Open reads d for its pool: pgxpool's own settings (pool_max_conns
// and the other pool_* keys, which README's DSNs use) are taken out. A
// connection opened on d itself (pgx.Connect, database/sql's "pgx") sent
// them to the server as run-time parameters, which refused the connection
// ("unrecognized configuration parameter \"pool_max_conns\"", attack56b
// F3). The error is pgx's, which quotes no password.
func ConnConfig(d string) (*pgx.ConnConfig, error) {
	cfg, err := pgxpool.ParseConfig(d)
	if err != nil {
		return nil, err
	}
	return cfg.ConnConfig, nil
}
