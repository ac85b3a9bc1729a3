package tests

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLITailEndFollowPrintsALateCommit: `streams tail S --end --follow`
// prints every event committed after it started, one whose transaction
// drew its offset before the tail started (below the head) and committed
// after too: "the end" is the settled horizon, not the head.
func TestCLITailEndFollowPrintsALateCommit(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "pg" {
			t.Skip("SQLite commits in offset order (one writer): no offset below the head is still open")
		}
		bin := cliBin(t)
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("orders")
		_, err := st.Publish(c, []byte("before"))
		require.NoError(t, err)

		tx, err := s.Begin(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(c) })
		slow, err := st.PublishTx(c, tx, []byte("slow"))
		require.NoError(t, err)
		fast, err := st.Publish(c, []byte("fast"))
		require.NoError(t, err)
		require.Less(t, slow, fast)

		pool := e.pool(t)
		listens := func() int {
			var n int
			require.NoError(t, pool.QueryRow(c, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND query LIKE '%LISTEN alkstore%' AND pid <> pg_backend_pid()`).Scan(&n))
			return n
		}
		base := listens()

		cmd := exec.Command(bin, "--dsn", e.dsn, "--json", "streams", "tail", "orders", "--end", "--follow")
		cmd.Env = append(os.Environ(), "ALKSTORE_DSN=", "DATABASE_URL=")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		var mu sync.Mutex
		var printed []int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var ev struct{ Offset int64 }
				if json.Unmarshal(sc.Bytes(), &ev) == nil {
					mu.Lock()
					printed = append(printed, ev.Offset)
					mu.Unlock()
				}
			}
		}()
		// The tail follows once its store LISTENs (Follow attached).
		require.Eventually(t, func() bool { return listens() > base }, 30*time.Second, 10*time.Millisecond)

		require.NoError(t, tx.Commit(c)) // after the tail started
		marker, err := st.Publish(c, []byte("after"))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(printed) > 0 && printed[len(printed)-1] == marker
		}, 30*time.Second, 10*time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		mu.Lock()
		defer mu.Unlock()
		assert.Contains(t, printed, slow, "committed after the tail started: --end --follow must print it (slow %d, fast %d, marker %d)", slow, fast, marker)
		// Events that had committed below the head when the tail started
		// may print too (a new process's horizon is conservative while a
		// transaction holds it back: it may start below "before"); none
		// may be skipped.
		assert.IsIncreasing(t, printed)
	})
}

// TestCLITailHeldBackCountsOffsetsNotEvents: the held-back line names the
// offsets between the horizon and the newest committed event as offsets,
// not as committed events: one event waiting above three offsets drawn
// by a transaction still open read "4 committed offset(s)" (attack56b F9).
func TestCLITailHeldBackCountsOffsetsNotEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "pg" {
			t.Skip("SQLite commits in offset order (one writer): nothing is held back")
		}
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("orders")
		_, err := st.Publish(c, []byte("before"))
		require.NoError(t, err)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(c) })
		for range 3 {
			_, err = st.PublishTx(c, tx, []byte("open"))
			require.NoError(t, err)
		}
		late, err := st.Publish(c, []byte("late"))
		require.NoError(t, err)
		r := runCLI(t, "", "--dsn", e.dsn, "streams", "tail", "orders", "--from", "0")
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.err, "held back: committed events above the settled horizon")
		assert.Regexp(t, `up to offset `+strconv.FormatInt(late, 10)+`, the newest committed; \d+ offset\(s\) between`, r.err)
		assert.NotContains(t, r.err, "committed offset(s)")
	})
}
