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
// its job's business row, says so on stdout, then lingers 20-40 ms
// before returning, so a SIGKILL sent on that line lands between the
// business write and the commit. n is the claims' Visibility in ms.
func workTxChild(ctx context.Context, s *store.Store, queue string, n int) int {
	opts := store.WorkOpts{Worker: fmt.Sprintf("child-%d", os.Getpid()), Concurrency: 4,
		Visibility: time.Duration(n) * time.Millisecond}
	err := s.Queue(queue).WorkTx(ctx, opts, func(ctx context.Context, tx store.Tx, j *store.Job) error {
		if err := writeEffect(ctx, tx, j.ID); err != nil {
			return err
		}
		fmt.Println("wrote", j.ID)
		time.Sleep(20*time.Millisecond + rand.N(20*time.Millisecond)) // the window a kill lands in
		return nil
	})
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// TestKilledTxWorkersCommitEachJobOnce: two worker processes run WorkTx on
// one queue, each handler writing one business row per job in its
// transaction; the test SIGKILLs one of them right after it reports its
// 1st-8th business write (so between a write and its commit) and starts it
// again, and the other races it for the claims that lapse. Kills follow the
// children's progress, not the clock, so a slow machine cannot starve them. At the end every job ran to
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
		// start runs a child; its channel gets a value for each business
		// write it reports, so a kill can wait for the child's own progress
		// (never for time: a slow machine only makes the test slower).
		start := func() (*exec.Cmd, chan struct{}) {
			cmd := startChild(c, "worktx", e.dsn, q.Name(), 500)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			writes := make(chan struct{}, jobs*4)
			readers.Go(func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "wrote ") {
						wrote.Add(1)
						select {
						case writes <- struct{}{}:
						default:
						}
					}
				}
			})
			return cmd, writes
		}
		type child struct {
			cmd    *exec.Cmd
			writes chan struct{}
		}
		var workers [2]child
		for i := range workers {
			workers[i].cmd, workers[i].writes = start()
		}
		defer func() {
			for _, w := range workers {
				if w.cmd != nil {
					_ = w.cmd.Process.Kill()
					_ = w.cmd.Wait()
				}
			}
			readers.Wait()
		}()

		done := func() bool {
			st, err := q.Stats(c)
			require.NoError(t, err)
			require.Zero(t, st.Dead, "no job may run out of attempts")
			return st.Ready+st.Scheduled+st.Running == 0
		}
		// Each round picks a child and lets it report 1-8 business writes,
		// then SIGKILLs it at once: the kill lands right after a write the
		// child reported, while that handler lingers before its commit.
		// Kills stop after maxKills so the jobs then run to the end.
		kills, maxKills := 0, max(10, jobs/5)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for kills < maxKills && !done() {
			i, want := rand.N(len(workers)), 1+rand.N(8)
			for got := 0; got < want; {
				select {
				case <-workers[i].writes:
					got++
				case <-tick.C:
					if done() {
						want = 0
					}
				case <-c.Done():
					require.NoError(t, c.Err(), "the jobs did not finish; %d kills so far", kills)
				}
			}
			require.NoError(t, workers[i].cmd.Process.Kill()) // SIGKILL: no cleanup, no rollback but the database's
			_ = workers[i].cmd.Wait()
			kills++
			workers[i].cmd, workers[i].writes = start()
		}
		for !done() {
			select {
			case <-tick.C:
			case <-c.Done():
				require.NoError(t, c.Err(), "the jobs did not finish after %d kills", kills)
			}
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
		for i, w := range workers {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
			workers[i].cmd = nil
		}
		readers.Wait()
		t.Logf("%d jobs, %d kills, %d business writes of which %d rolled back", jobs, kills, wrote.Load(), wrote.Load()-int64(jobs))
		assert.Greater(t, wrote.Load(), int64(jobs), "some kill landed between a business write and its commit")
	})
}
