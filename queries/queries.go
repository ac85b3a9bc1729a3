// Package queries holds the statements sqlc cannot generate code for:
// SQLite's PRAGMAs, savepoints and transaction statements (sqlc skips them). Each stays in its file beside the
// other statements of its mechanism, and this package hands it out.
package queries

import (
	_ "embed"
	"strings"
)

//go:embed lite/notify.sql
var liteNotify string

//go:embed lite/schema.sql
var liteSchema string

//go:embed lite/queues.sql
var liteQueues string

// DataVersion is lite/notify.sql's DataVersion: it changes whenever another
// connection commits to the SQLite file.
var DataVersion = statement(liteNotify, "DataVersion")

// SchemaObjects is lite/schema.sql's SchemaObjects: the main database's
// tables, which Open looks at before it asks goose anything.
var SchemaObjects = statement(liteSchema, "SchemaObjects")

// SavepointBatch, ReleaseBatch and RollbackToBatch are lite/queues.sql's
// savepoint around a batch form inside the caller's transaction.
var (
	SavepointBatch  = statement(liteQueues, "SavepointBatch")
	ReleaseBatch    = statement(liteQueues, "ReleaseBatch")
	RollbackToBatch = statement(liteQueues, "RollbackToBatch")
)

// SavepointHandler and RollbackToHandler are lite/queues.sql's savepoint
// before a transactional handler, which a failed handler rolls back to.
var (
	SavepointHandler  = statement(liteQueues, "SavepointHandler")
	RollbackToHandler = statement(liteQueues, "RollbackToHandler")
)

// ProbeTransaction and EndProbe are lite/queues.sql's test of whether an
// adopted transaction is still open on its connection.
var (
	ProbeTransaction = statement(liteQueues, "ProbeTransaction")
	EndProbe         = statement(liteQueues, "EndProbe")
)

// statement is the body of the query named name ("-- name: Name :kind") in
// src, without its comment lines; "" when src has no such query.
func statement(src, name string) string {
	_, rest, ok := strings.Cut(src, "-- name: "+name+" ")
	if !ok {
		return ""
	}
	_, body, _ := strings.Cut(rest, "\n")
	body, _, _ = strings.Cut(body, "-- name: ")
	var stmt []string
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			stmt = append(stmt, line)
		}
	}
	return strings.TrimSpace(strings.Join(stmt, "\n"))
}
