package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/testbin"
)

// The CLI tests here run the alkstore command as an operator would, on the
// engines' real databases (cmd/alkstore's own tests cover each command's
// output; these cover promises the library and the command share).

// cliBuild is the alkstore command, built once per go test run into
// ../bin/alkstore-tests (internal/testbin: cmd/alkstore's tests run the same
// binary, and whichever package builds it second links nothing). TestMain
// starts the build in the background when a test that runs the command is
// to run, so it overlaps the serial tests instead of holding one of them.
var cliBuild struct {
	once sync.Once
	done chan struct{} // closed when the build ended
	path string
	err  error
}

// cliTests are the tests that run the command (cliBin), for TestMain's
// willRun.
var cliTests = []string{"TestCLIMigrateKeyValueDSN", "TestCLIMigrateStatusFailsOnADatabaseItCannotOpen",
	"TestCLIMigrateRefusesWhatOpenRefuses", "TestCLIUnknownSubcommandIsBadInput", "TestCLITailEndFollowPrintsALateCommit",
	"TestDSNPasswordNoFragmentShows", "TestDSNPasswordOfAMistypedPostgresDSNDoesNotShow"}

// startCLIBuild starts building the command, once.
func startCLIBuild() {
	cliBuild.once.Do(func() {
		cliBuild.done = make(chan struct{})
		go func() {
			defer close(cliBuild.done)
			cliBuild.path, cliBuild.err = testbin.Alkstore()
		}()
	})
}

// cliBin is the alkstore command, waiting for its build, with no deadline
// (call it before ctx(t)).
func cliBin(t testing.TB) string {
	t.Helper()
	startCLIBuild() // a no-op when TestMain started it
	<-cliBuild.done
	require.NoError(t, cliBuild.err)
	return cliBuild.path
}

// cliResult is one run of the command: its stdout, stderr and exit code.
type cliResult struct {
	out, err string
	code     int
}

// runCLI runs the command with args in dir (a fresh temporary directory
// when empty), the DSN only from args (the environment's are cleared).
func runCLI(t *testing.T, dir string, args ...string) cliResult {
	t.Helper()
	bin := cliBin(t)
	if dir == "" {
		dir = t.TempDir()
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ALKSTORE_DSN=", "DATABASE_URL=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{out.String(), errb.String(), code}
}
