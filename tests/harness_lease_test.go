package tests

import (
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/pgtest"
)

// leaseProbeEnv makes a test of the harness below, in a child run, the run
// it checks.
const leaseProbeEnv = "ALK_TEST_LEASE_PROBE"

// runProbe runs t alone in a child run of this binary with flags and the
// environment variables env, where it is the run it checks, and returns
// the run's output once it failed.
func runProbe(t *testing.T, env []string, flags ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx(t), os.Args[0], append([]string{"-test.run=^" + t.Name() + "$",
		"-test.timeout=90s", "-test.v"}, flags...)...)
	cmd.Env = append(append(os.Environ(), leaseProbeEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the run fails\n%s", out)
	require.Equal(t, 1, exit.ExitCode(), "a test failed (not a timeout's panic)\n%s", out)
	return string(out)
}

// probes skips a test of the leases where the run has no throwaway
// clusters.
func probes(t *testing.T) {
	t.Helper()
	if !slices.Contains(engines, "pg") || os.Getenv("ALK_PG_DSN") != "" {
		t.Skip("a test of the throwaway clusters' leases: ALK_ENGINES leaves out pg, or ALK_PG_DSN names the server")
	}
}

// TestLeaseRefusesParallelSubtestsOfHolders: a test that waits for a
// PostgreSQL server while a test holding one waits for its parallel
// subtests fails at once, naming the rule, instead of hanging the run. In
// a run of its own with -parallel=2: a1 and a2 each take a server (the
// run's two) and return, their parallel subtests pending (each holds its
// server until b has asked for one); then b asks for a server.
func TestLeaseRefusesParallelSubtestsOfHolders(t *testing.T) {
	if os.Getenv(leaseProbeEnv) != "" {
		leaseProbe(t)
		return
	}
	probes(t)
	parallelTest(t)
	out := runProbe(t, nil, "-test.parallel=2")
	for _, want := range []string{"--- FAIL: " + t.Name() + "/b", "must not call t.Parallel", "--- PASS: " + t.Name() + "/a1/sub"} {
		require.Contains(t, out, want)
	}
}

func leaseProbe(t *testing.T) {
	var parked sync.WaitGroup
	asked := make(chan struct{})
	for _, name := range []string{"a1", "a2"} {
		parked.Add(1)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "pg")
			t.Cleanup(func() { <-asked }) // before the server is given back
			t.Run("sub", func(t *testing.T) {
				t.Parallel()
				e.open(t)
			})
			parked.Done()
		})
	}
	t.Run("b", func(t *testing.T) {
		t.Parallel()
		t.Cleanup(func() { close(asked) })
		parked.Wait()
		newEnv(t, "pg")
	})
}

// TestLeaseFailsATestThatLeavesASession: a test that leaves a session on
// its server (a connection, a store or a pool it did not close) fails when
// its lease ends, naming the session (the server is then retired).
func TestLeaseFailsATestThatLeavesASession(t *testing.T) {
	if os.Getenv(leaseProbeEnv) != "" {
		emptyDatabases(t) // a session is left whatever the database holds: the child run migrates no template
		e := newEnv(t, "pg")
		conn, err := pgx.Connect(ctx(t), e.dsn+"&application_name=forgotten-conn")
		require.NoError(t, err)
		_, err = conn.Exec(ctx(t), "BEGIN")
		require.NoError(t, err)
		forgotten = conn // no Close; kept from the garbage collector
		return
	}
	probes(t)
	parallelTest(t)
	out := runProbe(t, nil)
	for _, want := range []string{"--- FAIL: " + t.Name(), "left on its PostgreSQL server",
		"application_name 'forgotten-conn'", "idle in transaction"} {
		require.Contains(t, out, want)
	}
}

var forgotten *pgx.Conn

// TestEachEngineInTurnRefusesParallelAncestors: eachEngineInTurn in a
// subtest of a parallel test fails (other tests run beside it), though the
// subtest itself is not parallel.
func TestEachEngineInTurnRefusesParallelAncestors(t *testing.T) {
	if os.Getenv(leaseProbeEnv) != "" {
		parallelTest(t)
		t.Run("sub", func(t *testing.T) {
			eachEngineInTurn(t, func(*testing.T, *engineEnv) {})
		})
		return
	}
	parallelTest(t)
	out := runProbe(t, []string{pgtest.EnginesEnv + "=lite"}) // the check comes first: no server needed
	for _, want := range []string{"--- FAIL: " + t.Name() + "/sub", "eachEngineInTurn in a parallel test, or a subtest of one"} {
		require.Contains(t, out, want)
	}
}
