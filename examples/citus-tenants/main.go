// Command citus-tenants runs two tenants of a shop on a Citus cluster: each
// tenant's business table sits in a distributed schema of its own, the two
// schemas on different workers, and each order commits its business row,
// an "order placed" event and an invoice job in one transaction through the
// coordinator. alkstore's own tables stay on the coordinator
// (docs/design/citus.md): the tenants share one store and keep apart by
// stream and queue names.
//
//	ALK_CITUS_DSN=postgres://user@coordinator/db go run ./examples/citus-tenants
//	go run ./examples/citus-tenants postgres://user@coordinator/db
//
// The database needs the Citus extension and two workers; without them the
// example says so and exits without error.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/alkstore/alkstore/store"
)

// DSNEnv names the coordinator when no argument does.
const DSNEnv = "ALK_CITUS_DSN"

var tenants = []string{"shop_eu", "shop_us"}

func main() {
	log.SetFlags(0)
	dsn := os.Getenv(DSNEnv)
	if len(os.Args) > 1 {
		dsn = os.Args[1]
	}
	if err := run(context.Background(), dsn); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dsn string) error {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		fmt.Printf("citus-tenants: skipped: set %s (or pass a postgres:// URL) to a Citus coordinator's database with two workers\n", DSNEnv)
		return nil
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	workers, err := citusWorkers(ctx, pool)
	if err != nil {
		return err
	}
	if len(workers) < 2 {
		fmt.Printf("citus-tenants: skipped: the database has no Citus extension or fewer than two workers (%d)\n", len(workers))
		return nil
	}
	// The application shares its pool with the store; Open keeps alkstore's
	// tables on the coordinator whatever the database's sharding setting.
	s, err := store.OpenPool(ctx, pool)
	if err != nil {
		return err
	}
	defer s.Close()

	for i, tenant := range tenants {
		port, err := placeTenant(ctx, pool, tenant, workers[i])
		if err != nil {
			return fmt.Errorf("%s: %w", tenant, err)
		}
		fmt.Printf("%s: orders on the worker at port %d\n", tenant, port)
	}

	// Each order: the business row on the tenant's worker, its event and its
	// invoice job in the coordinator's alkstore tables, one transaction.
	first := time.Now().UnixNano() // order ids; a database may hold earlier runs'
	for i := range 3 {
		for _, tenant := range tenants {
			id := first + int64(i)
			err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO `+tenant+`.orders (id, item) VALUES ($1, $2)`, id, "teapot"); err != nil {
					return err
				}
				p := []byte(strconv.FormatInt(id, 10))
				if _, err := s.Stream(tenant+"/orders").PublishTx(ctx, tx, p); err != nil {
					return err
				}
				_, err := s.Queue(tenant+"/invoices").EnqueueTx(ctx, tx, p, store.EnqueueOpts{})
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: order %d: %w", tenant, id, err)
			}
		}
	}

	// A failed checkout rolls back on both nodes: neither the row on the
	// worker nor the event and job on the coordinator remain.
	errDeclined := errors.New("payment declined")
	err = s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shop_eu.orders (id, item) VALUES ($1, 'kettle')`, first+100); err != nil {
			return err
		}
		if _, err := s.Queue("shop_eu/invoices").EnqueueTx(ctx, tx, []byte("declined"), store.EnqueueOpts{}); err != nil {
			return err
		}
		return errDeclined
	})
	if !errors.Is(err, errDeclined) {
		return fmt.Errorf("declined checkout: %w", err)
	}

	for _, tenant := range tenants {
		var rows int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+tenant+`.orders WHERE id >= $1`, first).Scan(&rows); err != nil {
			return err
		}
		jobs, err := s.Queue(tenant+"/invoices").Claim(ctx, "invoicer", 10, time.Minute)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if err := j.Ack(ctx); err != nil {
				return err
			}
		}
		evs, err := settled(ctx, s.Stream(tenant+"/orders"), first)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d orders committed, %d events, %d invoice jobs run\n", tenant, rows, evs, len(jobs))
	}
	return nil
}

// worker is a Citus worker node.
type worker struct {
	host string
	port int32
}

// citusWorkers lists the cluster's workers; none without Citus.
func citusWorkers(ctx context.Context, pool *pgxpool.Pool) ([]worker, error) {
	var citus bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil || !citus {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT nodename, nodeport FROM pg_dist_node
		WHERE groupid <> 0 AND noderole = 'primary' AND isactive ORDER BY nodeport`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (worker, error) {
		var w worker
		return w, r.Scan(&w.host, &w.port)
	})
}

// placeTenant creates the tenant's schema as a distributed schema (Citus's
// schema-based sharding) and its orders table, and moves the schema to w
// unless Citus placed it there.
func placeTenant(ctx context.Context, pool *pgxpool.Pool, tenant string, w worker) (int32, error) {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL`, tenant).Scan(&exists); err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL citus.enable_schema_based_sharding = on`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE `+tenant+`.orders (id bigint PRIMARY KEY, item text NOT NULL)`)
		return err
	})
	if err != nil {
		return 0, err
	}
	var port int32
	q := `SELECT nodeport FROM citus_shards WHERE table_name = to_regclass($1)`
	if err := pool.QueryRow(ctx, q, tenant+".orders").Scan(&port); err != nil {
		return 0, err
	}
	if port != w.port {
		// The move connects to the coordinator itself by citus.local_hostname
		// (default localhost): name it as the cluster registered it.
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT set_config('citus.local_hostname', nodename, true) FROM pg_dist_node WHERE groupid = 0`)
			if err == nil {
				_, err = tx.Exec(ctx, `SELECT citus_schema_move($1::regnamespace, $2, $3, 'block_writes')`, tenant, w.host, w.port)
			}
			return err
		})
		if err != nil {
			return 0, err
		}
		port = w.port
	}
	return port, nil
}

// settled counts the stream's events of this run (payloads are order ids
// from first on), reading until the three orders' events are readable: a
// read stops at the settled horizon, which passes a commit a moment later
// while other transactions are open.
func settled(ctx context.Context, st *store.Stream, first int64) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		n, after := 0, int64(0)
		for {
			evs, err := st.ReadSince(ctx, after, 500)
			if err != nil {
				return 0, err
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				if id, _ := strconv.ParseInt(string(ev.Payload), 10, 64); id >= first {
					n++
				}
			}
			after = evs[len(evs)-1].Offset
		}
		if n >= 3 {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
