package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/store"
)

// childEnv makes the test binary run the service (main) instead of tests,
// so the test can signal a real process.
const childEnv = "ALK_SERVICE_CHILD"

var (
	pgServer *pgtest.Server // nil when ALK_ENGINES leaves out pg
	engines  []string       // the engines ALK_ENGINES selects; both by default
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		main() // exits non-zero on an error
		os.Exit(0)
	}
	var err error
	if engines, err = pgtest.Engines(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !slices.Contains(engines, "pg") {
		os.Exit(m.Run()) // ALK_ENGINES=lite: no PostgreSQL needed
	}
	srv, err := pgtest.StartForTests()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgServer = srv
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// TestSIGINTLosesNoJob runs the service as a child process on both engines,
// sends it SIGINT while its handlers are busy, and checks that it exited
// cleanly with no job left claimed, none dead and none run twice; a second
// run then finishes the rest: every order got exactly one email, one
// payment and one webhook.
func TestSIGINTLosesNoJob(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			dsn := filepath.Join(t.TempDir(), "app.db")
			if engine == "pg" {
				var err error
				dsn, err = pgServer.NewDatabase(ctx)
				require.NoError(t, err)
			}
			const orders = 200

			// First run: place the orders, serve, and be interrupted early.
			s, err := store.Open(ctx, dsn) // migrated here, so the child does not race it
			require.NoError(t, err)
			defer s.Close()
			cmd, out := start(ctx, dsn, orders)
			waitTables(t, ctx, s)
			require.Eventually(t, func() bool { return effects(t, ctx, s, "email") >= 10 }, time.Minute, 5*time.Millisecond)
			t0 := time.Now()
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			require.NoError(t, cmd.Wait(), "the service stops cleanly on SIGINT:\n%s", out)
			t.Logf("first run stopped %s after SIGINT:\n%s", time.Since(t0), out)
			assert.Contains(t, out.String(), "stopped:")

			left := int64(0)
			for name, stats := range map[string]func(context.Context) (store.QueueStats, error){
				"emails": s.Queue("service-emails").Stats, "payments": s.Queue("service-payments").Stats, "webhooks": s.Outbox("service-webhooks").Stats,
			} {
				st, err := stats(ctx)
				require.NoError(t, err)
				assert.Zero(t, st.Running, "%s: a job was left claimed", name)
				assert.Zero(t, st.Dead, "%s", name)
				left += st.Ready + st.Scheduled
			}
			require.Positive(t, left, "the signal came after the service had done everything: it proved nothing")
			assert.Empty(t, twice(t, ctx, s), "a job ran twice")

			// Second run: no new orders; it finishes what the first left.
			cmd, out = start(ctx, dsn, 0)
			for _, kind := range []string{"email", "payment", "webhook"} {
				require.Eventually(t, func() bool { return effects(t, ctx, s, kind) >= orders }, 2*time.Minute, 50*time.Millisecond, kind)
			}
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			require.NoError(t, cmd.Wait(), "%s", out)
			for _, kind := range []string{"email", "payment", "webhook"} {
				var n, distinct int64
				require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					return tx.QueryRow(ctx, `SELECT COUNT(*), COUNT(DISTINCT order_id) FROM service_effects WHERE kind = $1`, kind).Scan(&n, &distinct)
				}))
				assert.EqualValues(t, orders, n, "%s: one per order", kind)
				assert.EqualValues(t, orders, distinct, "%s: every order", kind)
			}
			assert.Empty(t, twice(t, ctx, s), "a job ran twice")
		})
	}
}

// start runs the service on dsn, placing orders first.
func start(ctx context.Context, dsn string, orders int) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, os.Args[0], dsn, strconv.Itoa(orders))
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out // read only after Wait
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	return cmd, out
}

// waitTables waits until the service created its tables.
func waitTables(t *testing.T, ctx context.Context, s *store.Store) {
	require.Eventually(t, func() bool {
		return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			var n int64
			return tx.QueryRow(ctx, `SELECT COUNT(*) FROM service_effects`).Scan(&n)
		}) == nil
	}, time.Minute, 10*time.Millisecond)
}

func effects(t *testing.T, ctx context.Context, s *store.Store, kind string) int64 {
	var n int64
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.QueryRow(ctx, `SELECT COUNT(*) FROM service_effects WHERE kind = $1`, kind).Scan(&n)
	}))
	return n
}

// twice lists the jobs whose effect was recorded more than once.
func twice(t *testing.T, ctx context.Context, s *store.Store) []string {
	var dups []string
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		rows, err := tx.Query(ctx, `SELECT kind, job_id, COUNT(*) FROM service_effects GROUP BY kind, job_id HAVING COUNT(*) > 1`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var kind string
			var job, n int64
			if err := rows.Scan(&kind, &job, &n); err != nil {
				return err
			}
			dups = append(dups, fmt.Sprintf("%s job %d ran %d times", kind, job, n))
		}
		return rows.Err()
	}))
	return dups
}
