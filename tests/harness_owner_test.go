package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/pgtest"
)

// serverChildEnv, when set, makes the test binary a run that holds a
// throwaway cluster (serverChild) instead of running tests.
const serverChildEnv = "ALK_TEST_SERVER_CHILD"

// serverChild starts a throwaway cluster, prints its directory and its
// postmaster's process id on a line, and when its standard input ends
// stops it (mode "stop") or panics, as a test's panic or go test -timeout
// ends a run (mode "panic").
func serverChild(mode string) int {
	srv, err := pgtest.StartForTests()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s %d\n", srv.Dir(), srv.Pid())
	_, _ = io.Copy(io.Discard, os.Stdin)
	if mode == "panic" {
		panic("a run's panic")
	}
	srv.Stop()
	return 0
}

// heldServer is a serverChild's run and its cluster.
type heldServer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader
	stderr string // its file
	dir    string
	pid    int // the postmaster's
}

// holdServer starts a serverChild with TMPDIR tmp; it is killed when the
// test ends, if it still runs. Its cluster is known once ready returns.
func holdServer(t *testing.T, tmp, mode string) *heldServer {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serverChildEnv+"="+mode, "TMPDIR="+tmp)
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr")) // a panic's trace is no news
	require.NoError(t, err)
	t.Cleanup(func() { stderr.Close() })
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &heldServer{cmd: cmd, stdin: stdin, stdout: stdout, stderr: stderr.Name()}
}

// ready waits for the child's cluster to accept connections.
func (h *heldServer) ready(t *testing.T) {
	t.Helper()
	line, err := bufio.NewReader(h.stdout).ReadString('\n')
	if err != nil {
		out, _ := os.ReadFile(h.stderr)
		t.Fatalf("the child's cluster: %v\n%s", err, out)
	}
	_, err = fmt.Sscanf(line, "%s %d", &h.dir, &h.pid)
	require.NoError(t, err, line)
	require.True(t, running(h.pid), "the child's postmaster runs")
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func gone(path string) bool {
	_, err := os.Stat(path)
	return os.IsNotExist(err)
}

// TestAbandonedClustersAreSwept: a run that ends without its cleanup
// (SIGKILL, or a panic: a test's, or go test -timeout's) leaves no server
// running, and the next run's sweep removes its cluster's directory, while
// it leaves alone the cluster of a run still going (test binaries run side
// by side: go test ./...).
func TestAbandonedClustersAreSwept(t *testing.T) {
	if !slices.Contains(engines, "pg") || os.Getenv("ALK_PG_DSN") != "" {
		t.Skip("a test of the throwaway clusters: ALK_ENGINES leaves out pg, or ALK_PG_DSN names the server")
	}
	parallelTest(t)
	tmp := t.TempDir()
	for _, d := range []string{tmp, filepath.Dir(tmp)} { // run as root, the clusters run as postgres
		require.NoError(t, os.Chmod(d, 0o755))
	}
	// The children copy this run's initdb output, as every cluster of a
	// run but the first does, instead of each running initdb (3.3 s of CPU
	// at once in a fresh TMPDIR); the sweep leaves it alone.
	require.NoError(t, pgtest.ShareInitdb(tmp))
	killed, panicked, live := holdServer(t, tmp, "panic"), holdServer(t, tmp, "panic"), holdServer(t, tmp, "stop")
	for _, h := range []*heldServer{killed, panicked, live} {
		h.ready(t)
	}

	require.NoError(t, killed.cmd.Process.Kill())
	require.NoError(t, panicked.stdin.Close())
	for _, h := range []*heldServer{killed, panicked} {
		require.Error(t, h.cmd.Wait())
		require.Eventually(t, func() bool { return !running(h.pid) }, time.Minute, 10*time.Millisecond,
			"the postmaster ends with its run (the sweep stops one that does not: internal/pgtest's TestSweep)")
		require.DirExists(t, h.dir, "a run that ends so cleans nothing up")
	}
	require.ElementsMatch(t, []string{killed.dir, panicked.dir}, pgtest.Sweep(tmp))
	for _, h := range []*heldServer{killed, panicked} {
		require.Eventually(t, func() bool { return gone(h.dir) }, time.Minute, 10*time.Millisecond,
			"the sweep removes the ended run's directory")
	}

	require.True(t, running(live.pid), "the live run's postmaster still runs")
	require.DirExists(t, live.dir)
	require.NoError(t, live.stdin.Close()) // the live run ends as usual
	require.NoError(t, live.cmd.Wait())
	require.False(t, running(live.pid))
	require.Eventually(t, func() bool { return gone(live.dir) }, time.Minute, 10*time.Millisecond,
		"the live run removes its directory")
	require.Empty(t, pgtest.Sweep(tmp))
}
