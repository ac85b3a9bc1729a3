package litedriver

import (
	"context"
	"database/sql"
	"maps"
	"slices"
)

// KeptStatements lists the statements the connection of db (a pool of one)
// prepared and kept (conn.cached), sorted.
func KeptStatements(ctx context.Context, db *sql.DB) ([]string, error) {
	sc, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	var kept []string
	err = sc.Raw(func(dc any) error {
		kept = slices.Sorted(maps.Keys(dc.(*conn).stmts))
		return nil
	})
	return kept, err
}
