// Command sqlc-shared-tx runs an application's own sqlc-generated queries and
// alkstore in one transaction, both ways round:
//
//   - alkstore begins it (InTx) and the application's queries run on the
//     driver transaction under it (Tx.Pgx on Postgres, Tx.SQL on SQLite);
//   - the application begins it with its own driver and alkstore adopts it
//     (AdoptPgx, AdoptSQL); the application ends it.
//
// Either way an order row and its "order placed" event commit together, and
// a rolled-back checkout leaves neither behind.
//
//	go run ./examples/sqlc-shared-tx            # embedded SQLite
//	go run ./examples/sqlc-shared-tx postgres://user@host/db
//
// The application's schema, queries and sqlc config live beside this file;
// apppg and applite are what `sqlc generate -f sqlc.yaml` wrote from them.
package main

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/examples/sqlc-shared-tx/applite"
	"github.com/alkstore/alkstore/examples/sqlc-shared-tx/apppg"
	"github.com/alkstore/alkstore/store"
)

func main() { example.Main(run) }

var (
	//go:embed schema/pg/schema.sql
	pgSchema string
	//go:embed schema/lite/schema.sql
	liteSchema string

	errPaymentDeclined = errors.New("payment declined")
)

// appQueries is what this example uses of its two generated packages, whose
// methods have the same signatures. An application on one engine uses its
// one package directly: apppg.New(ptx).
type appQueries interface {
	CreateOrder(ctx context.Context, item string) (int64, error)
	CountOrders(ctx context.Context) (int64, error)
}

// queriesIn binds the application's queries to the driver transaction under
// a store.Tx, begun by the store or adopted.
func queriesIn(tx store.Tx) appQueries {
	if ptx, ok := tx.Pgx(); ok {
		return apppg.New(ptx)
	}
	stx, _ := tx.SQL()
	return applite.New(stx)
}

// appTx is a transaction the application began with its own driver: its
// queries, the store's handle on it (adopted), and how the application ends
// it.
type appTx struct {
	q                appQueries
	tx               store.Tx
	commit, rollback func(context.Context) error
}

func run(ctx context.Context, dsn string) error {
	s, begin, schema, closeAll, err := open(ctx, dsn)
	if err != nil {
		return err
	}
	defer closeAll()
	orders := s.Stream("sqlc-orders")

	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, schema)
		return err
	})
	if err != nil {
		return err
	}

	// 1. alkstore begins the transaction; the application's queries join it.
	checkout := func(item string, pay func() error) error {
		return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			id, err := queriesIn(tx).CreateOrder(ctx, item)
			if err != nil {
				return err
			}
			if _, err := orders.PublishWithKeyTx(ctx, tx, fmt.Sprint(id), []byte("order placed: "+item)); err != nil {
				return err
			}
			return pay()
		})
	}
	if err := checkout("teapot", func() error { return nil }); err != nil {
		return err
	}
	fmt.Println("store-begun: teapot committed with its event")
	err = checkout("kettle", func() error { return errPaymentDeclined })
	fmt.Printf("store-begun: kettle failed (%v): rolled back with its event\n", err)

	// 2. The application begins the transaction; alkstore adopts it.
	appCheckout := func(item string, pay func() error) error {
		atx, err := begin(ctx)
		if err != nil {
			return err
		}
		defer atx.rollback(ctx) // after commit: an error nobody needs
		id, err := atx.q.CreateOrder(ctx, item)
		if err != nil {
			return err
		}
		if _, err := orders.PublishWithKeyTx(ctx, atx.tx, fmt.Sprint(id), []byte("order placed: "+item)); err != nil {
			return err
		}
		if err := pay(); err != nil {
			return err // the deferred rollback ends it
		}
		// The store does not end what it adopted: its Commit refuses.
		if err := atx.tx.Commit(ctx); !errors.Is(err, store.ErrInvalidArgument) {
			return fmt.Errorf("store.Tx.Commit on an adopted transaction: %v", err)
		}
		return atx.commit(ctx)
	}
	if err := appCheckout("mug", func() error { return nil }); err != nil {
		return err
	}
	fmt.Println("app-begun:   mug committed with its event")
	err = appCheckout("spoon", func() error { return errPaymentDeclined })
	fmt.Printf("app-begun:   spoon failed (%v): rolled back with its event\n", err)

	var rows int64
	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		rows, err = queriesIn(tx).CountOrders(ctx)
		return err
	})
	if err != nil {
		return err
	}
	// One event per order row (this database may hold earlier runs').
	evs, err := example.Settled(ctx, int(min(rows, 100)), func(ctx context.Context) ([]store.Event, error) {
		return orders.ReadSince(ctx, 0, 100)
	})
	if err != nil {
		return err
	}
	fmt.Printf("sqlc_orders: %d row(s); sqlc-orders stream: %d event(s)\n", rows, len(evs))
	for _, ev := range evs {
		fmt.Printf("  offset %d key=%s %s\n", ev.Offset, *ev.Key, ev.Payload)
	}
	return nil
}

// open opens the store and the application's own database handle on the
// same database, and returns how the application begins a transaction with
// that handle, the application's schema for the engine, and what closes
// both.
func open(ctx context.Context, dsn string) (s *store.Store, begin func(context.Context) (appTx, error), schema string, closeAll func(), err error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		// The application's pgx pool, which the store shares.
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, nil, "", nil, err
		}
		if s, err = store.OpenPool(ctx, pool); err != nil {
			pool.Close()
			return nil, nil, "", nil, err
		}
		begin = func(ctx context.Context) (appTx, error) {
			ptx, err := pool.Begin(ctx)
			if err != nil {
				return appTx{}, err
			}
			tx, err := s.AdoptPgx(ptx)
			if err != nil {
				_ = ptx.Rollback(ctx)
				return appTx{}, err
			}
			return appTx{q: apppg.New(ptx), tx: tx, commit: ptx.Commit, rollback: ptx.Rollback}, nil
		}
		return s, begin, pgSchema, func() { s.Close(); pool.Close() }, nil
	}

	if s, err = store.Open(ctx, dsn); err != nil {
		return nil, nil, "", nil, err
	}
	// The application's own database/sql handle on the same file, through the
	// "sqlite3" driver (github.com/ncruces/go-sqlite3/driver), which the
	// store registers.
	uri := strings.TrimPrefix(dsn, "sqlite:")
	if !strings.HasPrefix(uri, "file:") {
		uri = "file:" + (&url.URL{Path: uri}).EscapedPath()
	}
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	db, err := sql.Open("sqlite3", uri+sep+"_pragma=busy_timeout(10000)")
	if err != nil {
		s.Close()
		return nil, nil, "", nil, err
	}
	begin = func(ctx context.Context) (appTx, error) {
		stx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return appTx{}, err
		}
		tx, err := s.AdoptSQL(stx)
		if err != nil {
			_ = stx.Rollback()
			return appTx{}, err
		}
		return appTx{q: applite.New(stx), tx: tx,
			commit:   func(context.Context) error { return stx.Commit() },
			rollback: func(context.Context) error { return stx.Rollback() }}, nil
	}
	return s, begin, liteSchema, func() { s.Close(); db.Close() }, nil
}
