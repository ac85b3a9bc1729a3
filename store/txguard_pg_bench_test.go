package store

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// nopDB is a driver that answers at once: what txGuard costs on its own,
// beside the round trip (about 100 µs) every statement pays.
type nopDB struct{ rows nopRows }

func (d *nopDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, nil
}

func (d *nopDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	d.rows.left = 3
	return &d.rows, nil
}

func (d *nopDB) QueryRow(context.Context, string, ...any) pgx.Row { return &d.rows }

type nopRows struct{ left int }

func (r *nopRows) Close()                                       {}
func (r *nopRows) Err() error                                   { return nil }
func (r *nopRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *nopRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *nopRows) Next() bool                                   { r.left--; return r.left >= 0 }
func (r *nopRows) Scan(dest ...any) error                       { *dest[0].(*int) = r.left; return nil }
func (r *nopRows) Values() ([]any, error)                       { return nil, nil }
func (r *nopRows) RawValues() [][]byte                          { return nil }
func (r *nopRows) Conn() *pgx.Conn                              { return nil }
func (r *nopRows) TypeMap() *pgtype.Map                         { return nil }

// BenchmarkTxGuard: a statement through the guard, uncontended, as the
// store's own (sqlc's calls): an Exec, a QueryRow and its Scan, a Query of
// three rows read and closed as sqlc's loop does; and AppQuery3, the
// application's Tx.Query of three rows (appRows), scanned into an *int.
func BenchmarkTxGuard(b *testing.B) {
	ctx := context.Background()
	newGuard := func() *txGuard {
		g := &txGuard{db: &nopDB{}}
		g.r.g, g.row.g = g, g
		return g
	}
	b.Run("Exec", func(b *testing.B) {
		g := newGuard()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := g.Exec(ctx, "x"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("QueryRow", func(b *testing.B) {
		g := newGuard()
		b.ReportAllocs()
		var n int
		for b.Loop() {
			if err := g.QueryRow(ctx, "x").Scan(&n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Query3", func(b *testing.B) {
		g := newGuard()
		b.ReportAllocs()
		var n int
		for b.Loop() {
			rows, err := g.Query(ctx, "x")
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				if err := rows.Scan(&n); err != nil {
					b.Fatal(err)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppQuery3", func(b *testing.B) {
		g := newGuard()
		b.ReportAllocs()
		var n int
		for b.Loop() {
			rows, err := g.appQuery(ctx, false, "x")
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				if err := rows.Scan(&n); err != nil {
					b.Fatal(err)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
