package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The CLI tests here run the alkstore command as an operator would, on the
// engines' real databases (cmd/alkstore's own tests cover each command's
// output; these cover promises the library and the command share).

var cliBuild struct {
	once sync.Once
	path string
	err  error
}

// cliBin is the alkstore command, built once per go test run into ../bin,
// with no deadline (call it before ctx(t)).
func cliBin(t testing.TB) string {
	t.Helper()
	cliBuild.once.Do(func() {
		cliBuild.path, cliBuild.err = filepath.Abs("../bin/alkstore-tests")
		if cliBuild.err != nil {
			return
		}
		if out, err := exec.Command("go", "build", "-o", cliBuild.path, "../cmd/alkstore").CombinedOutput(); err != nil {
			cliBuild.err = fmt.Errorf("building the alkstore command: %w\n%s", err, out)
		}
	})
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
