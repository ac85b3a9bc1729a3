package tests

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

func init() { childVerbs["worktx"] = workTxChild }

// workTxChild works queue with WorkTx until killed: each handler writes
// its job's business row, says so on stdout, then lingers up to 20 ms
// before returning, so a SIGKILL often lands between the business write
// and the commit. n is the claims' Visibility in ms.
func workTxChild(ctx context.Context, s *store.Store, queue string, n int) int {
	opts := store.WorkOpts{Worker: fmt.Sprintf("child-%d", os.Getpid()), Concurrency: 4,
		Visibility: time.Duration(n) * time.Millisecond}
	err := s.Queue(queue).WorkTx(ctx, opts, func(ctx context.Context, tx store.Tx, j *store.Job) error {
		if err := writeEffect(ctx, tx, j.ID); err != nil {
			return err
		}
		fmt.Println("wrote", j.ID)
		time.Sleep(rand.N(20 * time.Millisecond)) // widens the window a kill may land in
		return nil
	})
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// TestKilledTxWorkersCommitEachJobOnce: two worker processes run WorkTx on
// one queue, each handler writing one business row per job in its
// transaction; the test SIGKILLs one of them at random moments (often
// between a business write and its commit) and starts it again, and the
// other races it for the claims that lapse. At the end every job ran to
// completion and has exactly one business row: the effects of killed runs
// rolled back, and no job's effects committed twice. ALK_CRASH_LONG=1 runs
// 2000 jobs instead of 150.
func TestKilledTxWorkersCommitEachJobOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		createEffects(t, s)
		jobs := 150
		if os.Getenv("ALK_CRASH_LONG") != "" {
			jobs = 2000
		}
		c, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		q := s.Queue("crash-tx")
		ids, err := q.EnqueueMany(c, make([]store.NewJob, jobs))
		require.NoError(t, err)

		var wrote atomic.Int64 // business writes the children made, committed or not
		var readers sync.WaitGroup
		start := func() *exec.Cmd {
			cmd := startChild(c, "worktx", e.dsn, q.Name(), 500)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			readers.Go(func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "wrote ") {
						wrote.Add(1)
					}
				}
			})
			return cmd
		}
		workers := []*exec.Cmd{start(), start()}
		defer func() {
			for _, w := range workers {
				_ = w.Process.Kill()
				_ = w.Wait()
			}
			readers.Wait()
		}()

		kills := 0
		for {
			st, err := q.Stats(c)
			require.NoError(t, err)
			require.Zero(t, st.Dead, "no job may run out of attempts")
			if st.Ready+st.Scheduled+st.Running == 0 {
				break
			}
			require.NoError(t, c.Err(), "the jobs did not finish; %d kills so far", kills)
			time.Sleep(30*time.Millisecond + rand.N(220*time.Millisecond))
			i := rand.N(len(workers))
			require.NoError(t, workers[i].Process.Kill()) // SIGKILL: no cleanup, no rollback but the database's
			_ = workers[i].Wait()
			kills++
			workers[i] = start()
		}

		rows := effects(t, s)
		missing, twice := 0, 0
		for _, id := range ids {
			switch n := rows[id]; {
			case n == 0:
				missing++
			case n > 1:
				twice++
			}
		}
		assert.Zero(t, missing, "jobs completed without their business row")
		assert.Zero(t, twice, "jobs whose business row committed more than once")
		assert.Len(t, rows, jobs, "no business row of another job")
		for _, w := range workers {
			_ = w.Process.Kill()
			_ = w.Wait()
		}
		workers = nil
		readers.Wait()
		t.Logf("%d jobs, %d kills, %d business writes of which %d rolled back", jobs, kills, wrote.Load(), wrote.Load()-int64(jobs))
		assert.Greater(t, wrote.Load(), int64(jobs), "some kill landed between a business write and its commit")
	})
}
