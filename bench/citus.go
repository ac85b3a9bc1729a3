package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/alkstore/alkstore/store"
)

// The citus section (only with -only citus; docs/design/citus.md): alkstore
// on a Citus cluster of a coordinator and two workers, started from
// -citus-dir (../shared/citus: cluster.sh, and the extension installed by
// its build.sh), measured against the same work on the plain PostgreSQL
// server the other sections use. Without Citus it says so and measures
// nothing.
var (
	citusDir     = flag.String("citus-dir", "../shared/citus", "citus section: the folder holding cluster.sh")
	citusRounds  = flag.Int("citus-rounds", 1000, "citus section: latency samples per operation and side")
	citusTenants = flag.Int("citus-tenants", 8, "citus section: tenants (distributed schemas) in the balance run")
	citusTxs     = flag.Int("citus-txs", 300, "citus section: business transactions per tenant in the balance run")
)

// citusCluster is a running throwaway cluster.
type citusCluster struct {
	script, dir string
}

func (c citusCluster) run(args ...string) (string, error) {
	out, err := exec.Command(c.script, append([]string{args[0], c.dir}, args[1:]...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%s %s: %w: %s", c.script, args[0], err, ee.Stderr)
		}
	}
	return strings.TrimSpace(string(out)), err
}

// startCitus starts a cluster, or says why it cannot.
func startCitus() (citusCluster, string, error) {
	script := filepath.Join(*citusDir, "cluster.sh")
	if _, err := os.Stat(script); err != nil {
		return citusCluster{}, "", fmt.Errorf("%s is absent", script)
	}
	if so, _ := filepath.Glob("/usr/lib/postgresql/*/lib/citus.so"); len(so) == 0 {
		return citusCluster{}, "", fmt.Errorf("the Citus extension is not installed (%s)", filepath.Join(*citusDir, "build.sh"))
	}
	dir, err := os.MkdirTemp("", "alk-citus-bench.")
	if err != nil {
		return citusCluster{}, "", err
	}
	c := citusCluster{script: script, dir: dir}
	_, err = c.run("start", "5790")
	return c, dir, err
}

// citusDB creates a database on every node with schema-based sharding on,
// as an application distributing its own schemas would.
func (c citusCluster) citusDB(ctx context.Context, name string) string {
	dsn := must(c.run("createdb", name))
	conn := must(pgx.Connect(ctx, dsn))
	defer conn.Close(ctx)
	must(conn.Exec(ctx, `ALTER DATABASE `+name+` SET citus.enable_schema_based_sharding = on`))
	return dsn
}

// workerDSN is the DSN of worker n (1 or 2) for the coordinator's dsn.
func workerDSN(dsn string, n int) string {
	u := must(url.Parse(dsn))
	q := u.Query()
	port := must(strconv.Atoi(q.Get("port")))
	q.Set("port", strconv.Itoa(port+n))
	u.RawQuery = q.Encode()
	return u.String()
}

func benchCitus(ctx context.Context, newPlainDSN func() string) {
	c, dir, err := startCitus()
	if dir != "" {
		defer func() {
			if _, err := c.run("stop"); err != nil {
				log.Print(err)
			}
		}()
	}
	if err != nil {
		fmt.Printf("citus: SKIPPED: %v\n", err)
		return
	}
	// Both sides commit synchronously (fsync is off on both servers): the
	// plain server the other sections use runs with synchronous_commit off.
	plain := newPlainDSN()
	{
		conn := must(pgx.Connect(ctx, plain))
		must(conn.Exec(ctx, `ALTER DATABASE `+must(url.Parse(plain)).Path[1:]+` SET synchronous_commit = on`))
		conn.Close(ctx)
	}
	citusLatency(ctx, c.citusDB(ctx, "alk_bench_lat"), plain)
	plainBal := newPlainDSN()
	{
		conn := must(pgx.Connect(ctx, plainBal))
		for i := range *citusTenants {
			must(conn.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA tenant_%d; CREATE TABLE tenant_%d.orders (id bigint PRIMARY KEY, note text)`, i, i)))
		}
		must(conn.Exec(ctx, `ALTER DATABASE `+must(url.Parse(plainBal)).Path[1:]+` SET synchronous_commit = on`))
		conn.Close(ctx)
	}
	citusBalance(ctx, c.citusDB(ctx, "alk_bench_bal"), plainBal)
	citusRowAfterJob(ctx, c.citusDB(ctx, "alk_bench_row"))
}

// citusSide is one store the latency run measures: its store, and a
// business table (on a worker for Citus, local on the plain server).
type citusSide struct {
	name  string
	s     *store.Store
	table string
	seq   int64
}

func openCitusSide(ctx context.Context, name, dsn string) *citusSide {
	s := must(store.Open(ctx, dsn, store.WithMaxConns(4)))
	pool := must(pgxpool.New(ctx, dsn))
	defer pool.Close()
	must(pool.Exec(ctx, `CREATE SCHEMA tenant`))
	must(pool.Exec(ctx, `CREATE TABLE tenant.orders (id bigint PRIMARY KEY, note text)`))
	return &citusSide{name: name, s: s, table: "tenant.orders"}
}

// citusLatency measures p50 and p90 of single operations, one at a time,
// alternating the Citus coordinator and the plain server sample by sample
// so the machine's drift falls on both.
func citusLatency(ctx context.Context, citusDSN, plainDSN string) {
	sides := [2]*citusSide{openCitusSide(ctx, "citus", citusDSN), openCitusSide(ctx, "plain", plainDSN)}
	defer sides[0].s.Close()
	defer sides[1].s.Close()
	payload := make([]byte, 128)
	for _, sd := range sides {
		jobs := make([]store.NewJob, *citusRounds+100)
		for i := range jobs {
			jobs[i].Payload = payload
		}
		must(sd.s.Queue("claim").EnqueueMany(ctx, jobs))
	}
	ops := []struct {
		what string
		op   func(sd *citusSide) error
	}{
		{"publish", func(sd *citusSide) error { _, err := sd.s.Stream("lat").Publish(ctx, payload); return err }},
		{"enqueue", func(sd *citusSide) error {
			_, err := sd.s.Queue("lat").Enqueue(ctx, payload, store.EnqueueOpts{})
			return err
		}},
		{"claim+ack", func(sd *citusSide) error {
			jobs, err := sd.s.Queue("claim").Claim(ctx, "bench", 1, time.Minute)
			if err != nil || len(jobs) != 1 {
				return fmt.Errorf("claim: %d jobs, %w", len(jobs), err)
			}
			return jobs[0].Ack(ctx)
		}},
		{"business row alone (no alkstore)", func(sd *citusSide) error {
			sd.seq++
			return sd.s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+sd.table+` (id) VALUES ($1)`, sd.seq)
				return err
			})
		}},
		{"business row + publish + enqueue", func(sd *citusSide) error {
			sd.seq++
			return sd.s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO `+sd.table+` (id) VALUES ($1)`, sd.seq); err != nil {
					return err
				}
				if _, err := sd.s.Stream("orders").PublishTx(ctx, tx, payload); err != nil {
					return err
				}
				_, err := sd.s.Queue("mail").EnqueueTx(ctx, tx, payload, store.EnqueueOpts{})
				return err
			})
		}},
	}
	fmt.Printf("%-8s %-44s %14s %14s %7s\n", "", "latency, one at a time (µs)", "coordinator", "plain server", "ratio")
	for _, o := range ops {
		var lat [2][]time.Duration
		for i := -50; i < *citusRounds; i++ { // 50 warm-up rounds
			for k := range 2 {
				j := (i + k) & 1 // alternate which side goes first
				start := time.Now()
				must0(o.op(sides[j]))
				if i >= 0 {
					lat[j] = append(lat[j], time.Since(start))
				}
			}
		}
		for _, q := range []struct {
			name string
			at   float64
		}{{"p50", 0.5}, {"p90", 0.9}} {
			a, b := quantile(lat[0], q.at), quantile(lat[1], q.at)
			what := fmt.Sprintf("%s %s (µs)", o.what, q.name)
			if emit(fig{Engine: "citus", Figure: what, Value: us(a), Unit: "µs", Ceiling: us(b), Beside: "plain server", Lower: true}) {
				continue
			}
			fmt.Printf("%-8s %-44s %14.0f %14.0f %7.2f\n", "citus", what, us(a), us(b), us(a)/us(b))
		}
	}
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*q)]
}

// citusBalance runs citusTxs business transactions for each of
// citusTenants tenants at once, each tenant's schema placed by Citus (no
// moves), and reports where they landed and how the workers' committed
// transactions (pg_stat_database) split.
func citusBalance(ctx context.Context, dsn, plainDSN string) {
	pool := must(pgxpool.New(ctx, dsn))
	defer pool.Close()
	perWorker := map[int32]int{}
	for i := range *citusTenants {
		schema := fmt.Sprintf("tenant_%d", i)
		must(pool.Exec(ctx, `CREATE SCHEMA `+schema))
		must(pool.Exec(ctx, `CREATE TABLE `+schema+`.orders (id bigint PRIMARY KEY, note text)`))
		var port int32
		must0(pool.QueryRow(ctx, `SELECT nodeport FROM citus_shards WHERE table_name = to_regclass($1)`, schema+".orders").Scan(&port))
		perWorker[port]++
	}
	commits := func() [3]int64 { // coordinator, worker 1, worker 2
		var out [3]int64
		for n := range 3 {
			d := dsn
			if n > 0 {
				d = workerDSN(dsn, n)
			}
			conn := must(pgx.Connect(ctx, d))
			must0(conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&out[n]))
			conn.Close(ctx)
		}
		return out
	}
	// settled waits until the counters stop moving: each backend flushes its
	// counts when it goes idle or exits, up to a second late.
	settled := func() [3]int64 {
		prev := commits()
		for range 30 {
			time.Sleep(time.Second)
			cur := commits()
			if cur == prev {
				return cur
			}
			prev = cur
		}
		return prev
	}
	before := settled()
	took := tenantsLoad(ctx, dsn)
	pool.Reset() // the coordinator's cached connections to the workers end with its sessions
	after := settled()

	total := *citusTenants * *citusTxs
	plain := tenantsLoad(ctx, plainDSN)
	fmt.Printf("%-8s %d tenants × %d business transactions (row on a worker + publish + enqueue), %d at once: %.0f/s through the coordinator, %.0f/s on the plain server\n",
		"citus", *citusTenants, *citusTxs, *citusTenants, float64(total)/took.Seconds(), float64(total)/plain.Seconds())
	w1, w2 := after[1]-before[1], after[2]-before[2]
	for n, d := range []int64{w1, w2} {
		port := must(strconv.Atoi(must(url.Parse(workerDSN(dsn, n+1))).Query().Get("port")))
		share := 100 * float64(d) / float64(w1+w2)
		if !emit(fig{Engine: "citus", Figure: fmt.Sprintf("worker %d share of transactions (%%)", n+1), Value: share, Unit: "%"}) {
			fmt.Printf("%-8s worker %d: %d tenants placed, %d committed transactions (pg_stat_database), %.1f%% of the workers'\n",
				"citus", n+1, perWorker[int32(port)], d, share)
		}
	}
	fmt.Printf("%-8s coordinator: %d committed transactions (every business transaction commits there too)\n", "citus", after[0]-before[0])
}

// tenantsLoad runs citusTxs business transactions for each of citusTenants
// tenants at once on a fresh store (tables tenant_N.orders), and returns how
// long they took; the store is closed before it returns, and with its
// sessions the coordinator's cached connections to the workers.
func tenantsLoad(ctx context.Context, dsn string) time.Duration {
	s := must(store.Open(ctx, dsn, store.WithMaxConns(*citusTenants)))
	defer s.Close()
	payload := make([]byte, 128)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range *citusTenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			insert := fmt.Sprintf(`INSERT INTO tenant_%d.orders (id) VALUES ($1)`, i)
			st, q := s.Stream(fmt.Sprintf("tenant_%d/orders", i)), s.Queue(fmt.Sprintf("tenant_%d/mail", i))
			for id := range *citusTxs {
				must0(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					if _, err := tx.Exec(ctx, insert, id); err != nil {
						return err
					}
					if _, err := st.PublishTx(ctx, tx, payload); err != nil {
						return err
					}
					_, err := q.EnqueueTx(ctx, tx, payload, store.EnqueueOpts{})
					return err
				}))
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// citusRowAfterJob counts how often a job's handler, claiming the job as
// soon as it is visible on the coordinator, does not yet find the business
// row its transaction wrote on a worker: with two-phase commit the
// coordinator commits (the job becomes claimable) before the worker's
// COMMIT PREPARED (docs/design/citus.md). Producers and a busy Work loop
// run at once.
func citusRowAfterJob(ctx context.Context, dsn string) {
	pool := must(pgxpool.New(ctx, dsn))
	defer pool.Close()
	must(pool.Exec(ctx, `CREATE SCHEMA shop`))
	must(pool.Exec(ctx, `CREATE TABLE shop.orders (id bigint PRIMARY KEY)`))
	s := must(store.Open(ctx, dsn, store.WithMaxConns(16)))
	defer s.Close()
	q := s.Queue("shop/mail")
	const producers = 4
	total := producers * *citusTxs
	var handled, misses atomic.Int64
	done := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(done)
		_ = q.Work(wctx, store.WorkOpts{Concurrency: 4, PollInterval: 10 * time.Millisecond}, func(ctx context.Context, job *store.Job) error {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM shop.orders WHERE id = $1`, string(job.Payload)).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				misses.Add(1)
			}
			if handled.Add(1) == int64(total) {
				stop()
			}
			return nil
		})
	}()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range *citusTxs {
				id := int64(p**citusTxs + i)
				must0(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO shop.orders (id) VALUES ($1)`, id); err != nil {
						return err
					}
					_, err := q.EnqueueTx(ctx, tx, []byte(strconv.FormatInt(id, 10)), store.EnqueueOpts{})
					return err
				}))
			}
		})
	}
	wg.Wait()
	<-done
	fmt.Printf("%-8s a job's handler reading its business row on the worker: %d of %d jobs found no row yet (claimed before the worker's COMMIT PREPARED)\n",
		"citus", misses.Load(), total)
}
