package tests

import (
	"bufio"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/testbin"
)

// exampleNames are the runnable examples that take a DSN as their first
// argument (examples/internal/example); service serves until a signal.
var exampleNames = []string{"citus-tenants", "compacted-counter", "consumer-group", "demo", "email-worker", "live-feed", "order-event",
	"outbox-webhook", "schedules", "service", "sqlc-shared-tx"}

// TestExamplesRunTwiceSideBySide: every example runs on an empty database
// (their first Opens migrate it at once), then on one that already holds
// its own earlier run, each while the others run beside it,
// each owning its tables and queue, stream and outbox names (before: a
// second run failed on its own rows, schedules waited forever on the tick
// its first run paused, examples sharing shop_orders with other columns
// failed, and reads right after a commit found nothing while the others'
// transactions held the Postgres stream horizon).
func TestExamplesRunTwiceSideBySide(t *testing.T) {
	emptyDatabases(t)
	if testing.Short() {
		t.Skip("builds and runs every example twice on each engine")
	}
	// Parallel before it waits for the build: as a serial test it held the
	// serial tests after it (the wake gate's, 40 s) until the build ended
	// (62 s in make test, session 49), and so every parallel test too.
	parallelTest(t)
	startExamplesBuild() // a no-op when TestMain started it
	// The build is waited for until it ends, bounded by the run's own
	// -timeout (less a margin to say so), not by ctx's 2 min: linking
	// eleven binaries on a cold cache at load 13-34 took longer, and the
	// test failed with nothing wrong (session 50).
	select {
	case <-examplesBuild.done:
	case <-time.After(time.Until(examplesDeadline(t))):
		t.Fatal("building the examples took until the test run's deadline")
	}
	require.NoError(t, examplesBuild.err, "%s", examplesBuild.out)
	bin := examplesBuild.dir
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

// examplesBuild is every example, built once per go test run (without
// -race, as an application builds them) into the git-ignored ../bin/examples,
// where go build finds them up to date and links nothing the next time.
// TestMain starts the build in the background when
// TestExamplesRunTwiceSideBySide is to run, so linking nine binaries (on a
// cold cache, compiling their dependencies) overlaps the tests before it
// instead of adding to the run.
var examplesBuild struct {
	once sync.Once
	done chan struct{} // closed when the build ended
	dir  string
	out  []byte
	err  error
}

// startExamplesBuild starts building the examples, once, after the builds
// whose done channels are given have ended: TestMain's CLI build goes
// first (the command's tests wait for it; the examples' test is one), and
// the examples then find the packages they share with it compiled
// (internal/testbin's lock makes other test binaries' builds take turns
// with both).
func startExamplesBuild(after ...<-chan struct{}) {
	examplesBuild.once.Do(func() {
		examplesBuild.done = make(chan struct{})
		go func() {
			defer close(examplesBuild.done)
			for _, c := range after {
				<-c
			}
			if examplesBuild.dir, examplesBuild.err = filepath.Abs("../bin/examples"); examplesBuild.err != nil {
				return
			}
			examplesBuild.out, examplesBuild.err = testbin.Build("-o", examplesBuild.dir+string(filepath.Separator), "./examples/...")
		}()
	})
}

// waitBuilds waits for the started builds, so the run does not end in
// the middle of writing bin/examples or bin/alkstore-tests.
func waitBuilds() {
	for _, done := range []chan struct{}{examplesBuild.done, cliBuild.done} {
		if done != nil {
			<-done
		}
	}
}

// willRun reports whether go test's -run, -skip and -short flags let the
// top-level test name run (after flag.Parse). It may say yes for a test
// that then does not run, never the reverse for a plain top-level -run.
func willRun(name string) bool {
	if f := flag.Lookup("test.list"); testing.Short() || f != nil && f.Value.String() != "" {
		return false
	}
	match := func(flagName string) (set, matched bool) {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return false, false
		}
		first, _, _ := strings.Cut(f.Value.String(), "/")
		re, err := regexp.Compile(first)
		return true, err != nil || re.MatchString(name)
	}
	if set, matched := match("test.run"); set && !matched {
		return false
	}
	if set, matched := match("test.skip"); set && matched && !strings.Contains(flag.Lookup("test.skip").Value.String(), "/") {
		return false
	}
	return true
}

// examplesDeadline bounds the build's wait and each example's run: 30 s
// before the test run's deadline (go test -timeout), so the test says
// what it waited for, or 20 minutes from now in a run without one.
func examplesDeadline(t *testing.T) time.Time {
	if d, ok := t.Deadline(); ok {
		return d.Add(-30 * time.Second)
	}
	return time.Now().Add(20 * time.Minute)
}

// runExample runs one example on dsn; service is stopped with SIGINT once it
// serves. Its bound is examplesDeadline, not ctx's
// 2 min: eleven examples beside each other on a loaded machine are slow,
// not stuck.
func runExample(t *testing.T, path, dsn string) (string, error) {
	c, cancel := context.WithDeadline(context.Background(), examplesDeadline(t))
	defer cancel()
	cmd := exec.CommandContext(c, path, dsn)
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
