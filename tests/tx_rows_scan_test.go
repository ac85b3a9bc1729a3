package tests

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A Scan destination's own code (an sql.Scanner; on PostgreSQL a pgx
// RowScanner too) that runs statements through the Tx whose rows it scans
// (review56 R4). database/sql's Scan holds nothing of the transaction
// while a destination decodes, so on SQLite those statements run, beside
// the open rows, as any statement inside the rows loop does. On
// PostgreSQL, before the fix, the Scan held the guard's call lock while
// the destination ran: a statement found the rows streaming and failed
// "conn busy" at once, or, when an earlier statement had read them into
// memory, waited for that lock, which its own goroutine held, for ever.

// stmtScanner is an sql.Scanner destination for a name that, while it
// scans, runs statements through tx: a QueryRow (the name's id), a Query
// read to its end (the name in capitals), an Exec writing "<id> <tag>
// <NAME>" to open_dst, and a Tx form (EnqueueTx of the name to q).
type stmtScanner struct {
	ctx context.Context
	tx  store.Tx
	q   *store.Queue
	tag string
}

func (s *stmtScanner) Scan(src any) error {
	var name string
	switch v := src.(type) {
	case string:
		name = v
	case []byte:
		name = string(v)
	default:
		return fmt.Errorf("stmtScanner: scanning a %T", src)
	}
	var id int64
	if err := s.tx.QueryRow(s.ctx, `SELECT id FROM open_src WHERE name = $1`, name).Scan(&id); err != nil {
		return fmt.Errorf("QueryRow inside a Scan: %w", err)
	}
	rows, err := s.tx.Query(s.ctx, `SELECT upper(name) FROM open_src WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("Query inside a Scan: %w", err)
	}
	var upper string
	for rows.Next() {
		if err := rows.Scan(&upper); err != nil {
			rows.Close()
			return fmt.Errorf("Scan of a Query inside a Scan: %w", err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("Query inside a Scan: %w", err)
	}
	if _, err := s.tx.Exec(s.ctx, `INSERT INTO open_dst VALUES ($1, $2)`, id, s.tag+" "+upper); err != nil {
		return fmt.Errorf("Exec inside a Scan: %w", err)
	}
	if _, err := s.q.EnqueueTx(s.ctx, s.tx, []byte(name), store.EnqueueOpts{}); err != nil {
		return fmt.Errorf("EnqueueTx inside a Scan: %w", err)
	}
	return nil
}

// hangGuard fails a test whose call hangs (a Scan waiting for itself
// never returns; the statements the calls run take milliseconds) instead
// of hanging the suite: its store is not closed then, since Close would
// wait for the hung goroutine's transaction.
type hangGuard struct {
	t    *testing.T
	hung atomic.Bool
}

// openStore opens a store on e, closed at the test's end unless a call
// hung.
func (h *hangGuard) openStore(e *engineEnv) *store.Store {
	h.t.Helper()
	s, err := store.Open(ctx(h.t), e.dsn)
	require.NoError(h.t, err)
	h.t.Cleanup(func() {
		if !h.hung.Load() {
			_ = s.Close()
		}
	})
	return s
}

// returns runs f on a goroutine of its own and fails the test when it
// does not return within a minute.
func (h *hangGuard) returns(what string, f func() error) {
	h.t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		require.NoError(h.t, err, what)
	case <-time.After(time.Minute):
		h.hung.Store(true)
		h.t.Fatalf("%s: has not returned in a minute: deadlocked (a statement run from inside a Scan waiting for that Scan)", what)
	}
}

// TestAScanDestinationRunsStatementsThroughItsTx: an sql.Scanner
// destination running a QueryRow, a Query, an Exec and an EnqueueTx
// through the Tx whose rows it scans works on both engines, and the
// transaction commits all of it: for rows read into memory before the
// Scan (a statement after each Next, on PostgreSQL), for rows streaming
// (on PostgreSQL the Scanner's first statement reads the rest of them
// ahead, and the loop goes on from memory), and for a QueryRow's row.
// Before the fix, on PostgreSQL, the first form hung for ever (the
// Scanner's QueryRow waiting for the guard's call lock its own Scan
// held), and the second failed "conn busy".
func TestAScanDestinationRunsStatementsThroughItsTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		h := &hangGuard{t: t}
		s := h.openStore(e)
		openRowsTables(t, s)
		c := ctx(t)
		q := s.Queue("scan-stmts")
		loop := func(tag string, aheadFirst bool) func() error {
			return func() error {
				return s.InTx(c, func(ctx context.Context, tx store.Tx) error {
					rows, err := tx.Query(ctx, `SELECT id, name FROM open_src ORDER BY id`)
					if err != nil {
						return err
					}
					defer rows.Close()
					n := 0
					for rows.Next() {
						n++
						if aheadFirst {
							if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
								return fmt.Errorf("a statement before the Scan: %w", err)
							}
						}
						var id int64
						if err := rows.Scan(&id, &stmtScanner{ctx: ctx, tx: tx, q: q, tag: tag}); err != nil {
							return fmt.Errorf("row %d: %w", n, err)
						}
						if id != int64(n) {
							return fmt.Errorf("row %d scanned id %d", n, id)
						}
					}
					if n != 3 {
						return fmt.Errorf("the loop read %d rows, want 3", n)
					}
					return rows.Err()
				})
			}
		}
		h.returns("rows read ahead, then scanned into an sql.Scanner running statements", loop("ahead", true))
		h.returns("streaming rows scanned into an sql.Scanner running statements", loop("streamed", false))
		h.returns("a QueryRow's row scanned into an sql.Scanner running statements", func() error {
			return s.InTx(c, func(ctx context.Context, tx store.Tx) error {
				var id int64
				return tx.QueryRow(ctx, `SELECT id, name FROM open_src WHERE id = 2`).Scan(&id, &stmtScanner{ctx: ctx, tx: tx, q: q, tag: "row"})
			})
		})
		require.Equal(t, []string{
			"1 ahead ONE", "1 streamed ONE",
			"2 ahead TWO", "2 row TWO", "2 streamed TWO",
			"3 ahead THREE", "3 streamed THREE",
		}, openDst(t, s))
		jobs, err := q.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		var payloads []string
		for _, j := range jobs {
			payloads = append(payloads, string(j.Payload))
		}
		require.ElementsMatch(t, []string{"one", "two", "three", "one", "two", "three", "two"}, payloads)
	})
}

// nameRow is a pgx RowScanner destination for (id, name): it reads the
// row through every method pgx's rows give it (FieldDescriptions,
// RawValues, Values, Scan), and, with tx set, runs a statement through
// tx while it scans.
type nameRow struct {
	id   int64
	name string
	ctx  context.Context
	tx   store.Tx
}

func (n *nameRow) ScanRow(rows pgx.Rows) error {
	fields := rows.FieldDescriptions()
	if len(fields) != 2 || fields[0].Name != "id" || fields[1].Name != "name" {
		return fmt.Errorf("nameRow: fields %v", fields)
	}
	if raw := rows.RawValues(); len(raw) != 2 || raw[1] == nil {
		return fmt.Errorf("nameRow: raw values %q", raw)
	}
	vals, err := rows.Values()
	if err != nil {
		return fmt.Errorf("nameRow: Values: %w", err)
	}
	if len(vals) != 2 {
		return fmt.Errorf("nameRow: values %v", vals)
	}
	if err := rows.Scan(&n.id, &n.name); err != nil {
		return err
	}
	if vals[0] != int32(n.id) || vals[1] != n.name {
		return fmt.Errorf("nameRow: Values %#v, Scan %d %q", vals, n.id, n.name)
	}
	if n.tx != (store.Tx{}) {
		if _, err := n.tx.Exec(n.ctx, `INSERT INTO open_dst VALUES ($1, $2)`, n.id, "row scanner "+n.name); err != nil {
			return fmt.Errorf("Exec inside ScanRow: %w", err)
		}
	}
	return nil
}

// TestARowScannerScansRowsReadAhead: on PostgreSQL a pgx RowScanner
// destination, as pgx's own rows take it, scans the business rows of a
// Tx whether they stream or were read into memory (a statement beside
// them), its rows' Values, RawValues and FieldDescriptions work, and it
// may run statements through the Tx; so does a QueryRow's. Before the
// fix, rows read ahead failed to scan into it ("number of field
// descriptions must equal number of destinations, got 2 and 1"). A
// RowScanner is pgx's: on SQLite, database/sql refuses it, as it refuses
// any destination it cannot assign, and the Scan fails.
func TestARowScannerScansRowsReadAhead(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		openRowsTables(t, s)
		c := ctx(t)
		var got []string
		err := s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id, name FROM open_src ORDER BY id`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var r nameRow
				if len(got) == 1 { // the next rows are read ahead by a statement beside them
					if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
						return err
					}
				}
				if len(got) >= 1 {
					r.ctx, r.tx = ctx, tx
				}
				if err := rows.Scan(&r); err != nil {
					return fmt.Errorf("row %d: %w", len(got)+1, err)
				}
				got = append(got, fmt.Sprint(r.id, " ", r.name))
			}
			if err := rows.Err(); err != nil {
				return err
			}
			var r nameRow
			if err := tx.QueryRow(ctx, `SELECT id, name FROM open_src WHERE id = 3`).Scan(&r); err != nil {
				return fmt.Errorf("QueryRow: %w", err)
			}
			got = append(got, fmt.Sprint(r.id, " ", r.name))
			return nil
		})
		if e.name != "pg" {
			require.Error(t, err, "database/sql scanned into a pgx RowScanner")
			return
		}
		require.NoError(t, err)
		require.Equal(t, []string{"1 one", "2 two", "3 three", "3 three"}, got)
		require.Equal(t, []string{"2 row scanner two", "3 row scanner three"}, openDst(t, s))
	})
}

// TestADriverStatementBesideOpenRows: a statement run on the driver's
// transaction itself (Pgx, SQL) while rows of tx.Query are open. On
// SQLite database/sql runs it. On PostgreSQL the pgx.Tx is pgx's, which
// the store does not see: beside rows still streaming, pgx refuses it at
// once ("conn busy", nothing sent), and the transaction goes on: the
// same statement after the rows' Close, or through tx (which reads them
// ahead), runs, and beside rows a statement through tx read into memory
// the pgx.Tx's statement runs too. It must never hang.
func TestADriverStatementBesideOpenRows(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		h := &hangGuard{t: t}
		s := h.openStore(e)
		openRowsTables(t, s)
		c := ctx(t)
		direct := func(ctx context.Context, tx store.Tx, id int, name string) error {
			if ptx, ok := tx.Pgx(); ok {
				_, err := ptx.Exec(ctx, `INSERT INTO open_dst VALUES ($1, $2)`, id, name)
				return err
			}
			stx, ok := tx.SQL()
			require.True(t, ok)
			_, err := stx.ExecContext(ctx, `INSERT INTO open_dst VALUES ($1, $2)`, id, name)
			return err
		}
		h.returns("statements on the driver transaction beside open rows", func() error {
			return s.InTx(c, func(ctx context.Context, tx store.Tx) error {
				rows, err := tx.Query(ctx, `SELECT id FROM open_src ORDER BY id`)
				if err != nil {
					return err
				}
				defer rows.Close()
				if !rows.Next() {
					return fmt.Errorf("no first row: %w", rows.Err())
				}
				err = direct(ctx, tx, 1, "beside streaming rows")
				switch {
				case e.name != "pg" && err != nil:
					return fmt.Errorf("SQL's statement beside open rows: %w", err)
				case e.name == "pg" && (err == nil || !strings.Contains(err.Error(), "conn busy")):
					return fmt.Errorf("pgx's statement beside streaming rows: %v, want pgx's conn busy", err)
				}
				if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // reads the rows ahead
					return fmt.Errorf("tx's statement beside open rows: %w", err)
				}
				if err := direct(ctx, tx, 2, "beside rows read ahead"); err != nil {
					return fmt.Errorf("the driver's statement beside rows read ahead: %w", err)
				}
				n := 1
				for rows.Next() {
					n++
				}
				if err := rows.Err(); err != nil || n != 3 {
					return fmt.Errorf("the rows read %d rows, want 3 (their Err: %v)", n, err)
				}
				rows.Close()
				return direct(ctx, tx, 3, "after Close")
			})
		})
		want := []string{"2 beside rows read ahead", "3 after Close"}
		if e.name != "pg" {
			want = append([]string{"1 beside streaming rows"}, want...)
		}
		require.Equal(t, want, openDst(t, s))
	})
}
