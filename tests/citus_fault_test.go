package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// citusClusterEnv names the cluster a test may break: "CLUSTER_SH DIR",
// ../shared/citus/cluster.sh and the cluster's folder (.ci/test-citus sets
// it).
const citusClusterEnv = "ALK_CITUS_CLUSTER"

const (
	citusWorkers = `SELECT nodename, nodeport FROM pg_dist_node
		WHERE groupid <> 0 AND noderole = 'primary' AND isactive ORDER BY nodeport`
	citusSchemaPort   = `SELECT nodeport FROM citus_shards WHERE table_name = to_regclass($1) LIMIT 1`
	citusSchemaMove   = `SELECT citus_schema_move($1::regnamespace, $2, $3, 'block_writes')`
	citusLocalHost    = `SELECT set_config('citus.local_hostname', nodename, true) FROM pg_dist_node WHERE groupid = 0`
	citusRecover2PC   = `SELECT recover_prepared_transactions()`
	citusTenantSchema = `CREATE SCHEMA %s`
	citusTenantTable  = `CREATE TABLE %s.orders (id bigint PRIMARY KEY)`
	citusTenantInsert = `INSERT INTO %s.orders (id) VALUES ($1)`
	citusTenantIDs    = `SELECT id FROM %s.orders ORDER BY id`
)

// citusCluster is the cluster's control script and folder, or skips.
func citusCluster(t *testing.T) func(cmd string, worker int) {
	t.Helper()
	f := strings.Fields(os.Getenv(citusClusterEnv))
	if len(f) != 2 {
		require.Empty(t, os.Getenv("ALK_CITUS_REQUIRED"), "ALK_CITUS_REQUIRED is set but %s does not name the cluster (CLUSTER_SH DIR)", citusClusterEnv)
		t.Skipf("%s is unset: `make test-citus` names the cluster this test stops a worker of", citusClusterEnv)
	}
	return func(cmd string, worker int) {
		out, err := exec.Command(f[0], cmd, f[1], strconv.Itoa(worker)).CombinedOutput()
		require.NoError(t, err, "%s %d: %s", cmd, worker, out)
	}
}

// citusTenant is one tenant of the fault run: its business table in a
// distributed schema placed on one worker, its stream and queue in the
// coordinator's alkstore schema, and what its load saw.
type citusTenant struct {
	schema string
	worker int // 1 or 2

	commits  atomic.Int64 // business transactions whose Commit returned nil
	failures atomic.Int64
	// resumeFrom (UnixNano), once set, makes the next commit record its time
	// in resumedAt.
	resumeFrom, resumedAt atomic.Int64

	mu        sync.Mutex
	committed []int64        // ids whose transaction returned nil
	errs      map[string]int // error kind (SQLSTATE and the message's start) → count
	firstErr  error
}

func (tn *citusTenant) stream(s *store.Store) *store.Stream { return s.Stream(tn.schema + "/orders") }
func (tn *citusTenant) queue(s *store.Store) *store.Queue   { return s.Queue(tn.schema + "/mail") }

// errKind names an error by SQLSTATE and the start of its message, with
// socket paths and ports cut, so the figures group alike failures.
func errKind(err error) string {
	var pg *pgconn.PgError
	code := "-"
	if errors.As(err, &pg) {
		code = pg.Code
	}
	msg := err.Error()
	if i := strings.Index(msg, " failed with the following error"); i > 0 {
		msg = msg[:i] + " failed"
	}
	explained := strings.Contains(msg, "Citus: a worker")
	if len(msg) > 80 {
		msg = msg[:80] + "…"
	}
	if explained {
		msg += " (Citus: a worker … failed while it committed …)"
	}
	return code + " " + msg
}

// load commits business transactions until ctx ends: each writes the
// tenant's row on its worker and publishes an event and enqueues a job in
// the coordinator's alkstore tables, in one transaction through the
// coordinator.
func (tn *citusTenant) load(ctx context.Context, s *store.Store) {
	insert := fmt.Sprintf(citusTenantInsert, tn.schema)
	for id := int64(1); ctx.Err() == nil; id++ {
		p := strconv.AppendInt(nil, id, 10)
		err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, insert, id); err != nil {
				return err
			}
			if _, err := tn.stream(s).PublishTx(ctx, tx, p); err != nil {
				return err
			}
			_, err := tn.queue(s).EnqueueTx(ctx, tx, p, store.EnqueueOpts{})
			return err
		})
		if ctx.Err() != nil {
			return // the run ended: this transaction's outcome is whatever it is, the checks allow both
		}
		tn.mu.Lock()
		if err == nil {
			tn.committed = append(tn.committed, id)
			if tn.resumeFrom.Load() != 0 && tn.resumedAt.Load() == 0 {
				tn.resumedAt.Store(time.Now().UnixNano())
			}
			tn.commits.Add(1)
		} else {
			tn.errs[errKind(err)]++
			if tn.firstErr == nil {
				tn.firstErr = err
			}
			tn.failures.Add(1)
		}
		tn.mu.Unlock()
		if err != nil {
			time.Sleep(5 * time.Millisecond) // pace the retries against a stopped worker
		}
	}
}

// A worker stopped under load (`cluster.sh kill-worker`) and started again:
// the tenants whose business schemas are on the other worker keep
// committing throughout; the ones on the stopped worker get an error naming
// the unreachable node (their transactions roll back whole, events and jobs
// with them) and commit again once it is back; and afterwards every
// tenant's business rows, events (as a reader following the stream during
// the run saw them) and jobs (as a worker acked them) are the same set,
// holding every transaction that reported a commit.
func TestCitusWorkerOutageUnderLoad(t *testing.T) {
	e, pool := citusEnv(t)
	cluster := citusCluster(t)
	s := e.open(t)
	c := ctx(t)

	var workers [2]struct {
		host string
		port int32
	}
	rows, err := pool.Query(c, citusWorkers)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		require.Less(t, n, 2, "more than two workers")
		require.NoError(t, rows.Scan(&workers[n].host, &workers[n].port))
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 2, n, "two workers")

	tenants := []*citusTenant{{schema: "tenant_a", worker: 1}, {schema: "tenant_b", worker: 1},
		{schema: "tenant_c", worker: 2}, {schema: "tenant_d", worker: 2}}
	for _, tn := range tenants {
		tn.errs = map[string]int{}
		_, err := pool.Exec(c, fmt.Sprintf(citusTenantSchema, tn.schema))
		require.NoError(t, err)
		_, err = pool.Exec(c, fmt.Sprintf(citusTenantTable, tn.schema))
		require.NoError(t, err)
		require.True(t, distributedSchema(t, pool, tn.schema))
		w := workers[tn.worker-1]
		var port int32
		require.NoError(t, pool.QueryRow(c, citusSchemaPort, tn.schema+".orders").Scan(&port))
		if port != w.port {
			// The move connects to the coordinator itself by
			// citus.local_hostname (default localhost, where nothing listens).
			ptx, err := pool.Begin(c)
			require.NoError(t, err)
			_, err = ptx.Exec(c, citusLocalHost)
			require.NoError(t, err)
			_, err = ptx.Exec(c, citusSchemaMove, tn.schema, w.host, w.port)
			require.NoError(t, err)
			require.NoError(t, ptx.Commit(c))
			require.NoError(t, pool.QueryRow(c, citusSchemaPort, tn.schema+".orders").Scan(&port))
		}
		require.Equal(t, w.port, port, "%s placed on worker %d", tn.schema, tn.worker)
	}

	// Consumers, running throughout: a reader following each stream and a
	// worker acking each queue's jobs, both on the coordinator only.
	run, stop := context.WithCancel(c)
	defer stop()
	var wg sync.WaitGroup
	read := make([]map[int64]bool, len(tenants))
	acked := make([]sync.Map, len(tenants))
	var readMu sync.Mutex
	readAll := func(i int, after int64) int64 {
		for {
			evs, err := tenants[i].stream(s).ReadSince(c, after, 500)
			if err != nil || len(evs) == 0 {
				return after
			}
			readMu.Lock()
			for _, ev := range evs {
				id, _ := strconv.ParseInt(string(ev.Payload), 10, 64)
				read[i][id] = true
			}
			readMu.Unlock()
			after = evs[len(evs)-1].Offset
		}
	}
	readTo := make([]int64, len(tenants))
	for i, tn := range tenants {
		read[i] = map[int64]bool{}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for run.Err() == nil {
				readTo[i] = readAll(i, readTo[i])
				time.Sleep(time.Millisecond)
			}
		}()
		go func() {
			defer wg.Done()
			_ = tn.queue(s).Work(run, store.WorkOpts{Concurrency: 2, PollInterval: 50 * time.Millisecond},
				func(_ context.Context, job *store.Job) error {
					id, _ := strconv.ParseInt(string(job.Payload), 10, 64)
					acked[i].Store(id, true)
					return nil
				})
		}()
	}
	loadCtx, stopLoad := context.WithCancel(c)
	defer stopLoad()
	var loads sync.WaitGroup
	for _, tn := range tenants {
		loads.Add(1)
		go func() { defer loads.Done(); tn.load(loadCtx, s) }()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, 90*time.Second, time.Millisecond, what)
	}
	all := func(pick func(*citusTenant) bool, cond func(*citusTenant) bool) func() bool {
		return func() bool {
			for _, tn := range tenants {
				if pick(tn) && !cond(tn) {
					return false
				}
			}
			return true
		}
	}
	every := func(*citusTenant) bool { return true }
	onStopped := func(tn *citusTenant) bool { return tn.worker == 2 }
	onLive := func(tn *citusTenant) bool { return tn.worker == 1 }

	// The kill comes when every tenant has committed 50 transactions.
	const before, during, after = 50, 300, 50
	waitFor("every tenant commits before the outage", all(every, func(tn *citusTenant) bool { return tn.commits.Load() >= before }))
	cluster("kill-worker", 2) // returns once the worker has stopped
	killed := time.Now()
	// Counted from here: a stopped worker's tenant may still see a commit
	// that was past Citus's PREPARE when the worker stopped (its COMMIT
	// PREPARED is then a warning, and recovery finishes it).
	base := make([][2]int64, len(tenants))
	for i, tn := range tenants {
		base[i] = [2]int64{tn.commits.Load(), tn.failures.Load()}
	}
	restarted := false
	defer func() {
		if !restarted {
			cluster("start-worker", 2) // later tests need the worker back
		}
	}()
	// The outage lasts until the live worker's tenants have committed 300
	// more each and the stopped worker's have each failed 10 times since.
	for i, tn := range tenants {
		if onLive(tn) {
			waitFor(tn.schema+" keeps committing", func() bool { return tn.commits.Load() >= base[i][0]+during })
		} else {
			waitFor(tn.schema+" fails", func() bool { return tn.failures.Load() >= base[i][1]+10 })
		}
	}
	outage := make([][2]int64, len(tenants))
	for i, tn := range tenants {
		outage[i] = [2]int64{tn.commits.Load() - base[i][0], tn.failures.Load() - base[i][1]}
	}
	restartAt := time.Now()
	cluster("start-worker", 2)
	restarted = true
	back := time.Now()
	for _, tn := range tenants {
		tn.resumeFrom.Store(back.UnixNano())
	}
	for i, tn := range tenants {
		if onStopped(tn) {
			waitFor(tn.schema+" commits again", func() bool { return tn.commits.Load() >= base[i][0]+outage[i][0]+after })
		}
	}
	stopLoad()
	loads.Wait()

	// A transaction the kill caught between Citus's PREPARE on the worker
	// and COMMIT PREPARED commits there once the coordinator recovers it.
	// (A pooled connection whose session cached a connection to the stopped
	// worker fails once, with "server closed the connection unexpectedly".)
	require.Eventually(t, func() bool { _, err = pool.Exec(c, citusRecover2PC); return err == nil }, 30*time.Second, 10*time.Millisecond,
		"recover_prepared_transactions: %v", err)

	for i, tn := range tenants {
		var ids []int64
		rows, err := pool.Query(c, fmt.Sprintf(citusTenantIDs, tn.schema))
		require.NoError(t, err)
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		for _, id := range tn.committed {
			_, found := slices.BinarySearch(ids, id)
			require.True(t, found, "%s: id %d reported committed, no business row", tn.schema, id)
		}
		// Every event committed is read by the follower, which never passed one.
		waitFor(tn.schema+" follower catches up", func() bool {
			readMu.Lock()
			defer readMu.Unlock()
			return len(read[i]) >= len(ids)
		})
		readMu.Lock()
		assert.Len(t, read[i], len(ids), "%s: events read", tn.schema)
		for _, id := range ids {
			assert.True(t, read[i][id], "%s: event %d not read", tn.schema, id)
		}
		readMu.Unlock()
		waitFor(tn.schema+" jobs acked", func() bool {
			n := 0
			acked[i].Range(func(any, any) bool { n++; return true })
			return n >= len(ids)
		})
		for _, id := range ids {
			_, ok := acked[i].Load(id)
			assert.True(t, ok, "%s: job %d not acked", tn.schema, id)
		}
		t.Logf("%s (worker %d): %d committed, %d rows = events read = jobs acked; outage of %v: %d commits, %d failures; "+
			"first commit %v after the worker was up (start-worker took %v); errors %v",
			tn.schema, tn.worker, tn.commits.Load(), len(ids), restartAt.Sub(killed).Round(time.Millisecond),
			outage[i][0], outage[i][1], time.Duration(tn.resumedAt.Load()-back.UnixNano()).Round(time.Millisecond),
			back.Sub(restartAt).Round(time.Millisecond), tn.errs)
	}
	stop()
	wg.Wait()

	for _, tn := range tenants {
		if onStopped(tn) {
			require.NotNil(t, tn.firstErr, tn.schema)
			var opErr *store.OpError
			assert.ErrorAs(t, tn.firstErr, &opErr)
			t.Logf("%s: first error: %v", tn.schema, tn.firstErr)
			// Each error names the unreachable worker, or says a worker
			// failed while the transaction committed and that it rolled back.
			for kind := range tn.errs {
				assert.True(t, strings.Contains(kind, "connection to the remote node") || strings.Contains(kind, "Citus: a worker"),
					"%s: an error that names no worker: %s", tn.schema, kind)
			}
		} else {
			assert.Zero(t, tn.failures.Load(), "%s: failures on the live worker: %v", tn.schema, tn.errs)
		}
	}
}
