package tests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exampleNames are the runnable examples that take a DSN as their first
// argument (examples/internal/example); service serves until a signal.
var exampleNames = []string{"citus-tenants", "compacted-counter", "demo", "email-worker", "live-feed", "order-event",
	"outbox-webhook", "schedules", "service", "sqlc-shared-tx"}

// TestExamplesRunTwiceSideBySide: every example runs on a database that
// already holds its own earlier run and while the others run beside it,
// each owning its tables and queue, stream and outbox names (before: a
// second run failed on its own rows, schedules waited forever on the tick
// its first run paused, examples sharing shop_orders with other columns
// failed, and reads right after a commit found nothing while the others'
// transactions held the Postgres stream horizon).
func TestExamplesRunTwiceSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs every example twice on each engine")
	}
	bin := t.TempDir()
	build := exec.CommandContext(ctx(t), "go", "build", "-o", bin+string(filepath.Separator), "../examples/...")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		for round := range 2 {
			var wg sync.WaitGroup
			for _, name := range exampleNames {
				wg.Go(func() {
					out, err := runExample(t, filepath.Join(bin, name), e.dsn)
					assert.NoError(t, err, "round %d: %s: %s", round+1, name, out)
				})
			}
			wg.Wait()
		}
	})
}

// runExample runs one example on dsn; service is stopped with SIGINT once it
// serves.
func runExample(t *testing.T, path, dsn string) (string, error) {
	cmd := exec.CommandContext(ctx(t), path, dsn)
	if filepath.Base(path) != "service" {
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	cmd.Args = append(cmd.Args, "10") // orders to place
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "serving") {
			time.AfterFunc(time.Second, func() { _ = cmd.Process.Signal(os.Interrupt) })
		}
	}
	err = cmd.Wait()
	return strings.Join(lines, "\n") + "\n" + stderr.String(), err
}
