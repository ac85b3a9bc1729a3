package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// childEnv, when set, makes the test binary act as a child process instead
// of running tests: its value is "<verb> <dsn> <name> <n>", and the verb
// picks one of the children registered in childVerbs (each test file
// registers its own in an init function).
const childEnv = "ALK_TEST_CHILD"

// childVerbs maps a child verb to what the child does with its opened store.
var childVerbs = map[string]func(ctx context.Context, s *store.Store, name string, n int) int{
	"claim":   claimChild,
	"publish": publishChild,
	"lead":    leadChild,
}

func runChild(spec string) int {
	var verb, dsn, name string
	var n int
	if _, err := fmt.Sscanf(spec, "%s %s %s %d", &verb, &dsn, &name, &n); err != nil {
		fmt.Fprintln(os.Stderr, "bad child spec:", err)
		return 2
	}
	child, ok := childVerbs[verb]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown child verb:", verb)
		return 2
	}
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return child(ctx, s, name, n)
}

// startChild starts this test binary as a child process running verb.
func startChild(ctx context.Context, verb, dsn, name string, n int) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %d", childEnv, verb, dsn, name, n))
	cmd.Stderr = os.Stderr
	return cmd
}

// leadChild runs a scheduler called owner with a lease of n ms until killed.
func leadChild(ctx context.Context, s *store.Store, owner string, n int) int {
	sch := s.Scheduler(owner, store.SchedulerOpts{LeaseTTL: time.Duration(n) * time.Millisecond})
	if err := sch.Run(ctx); err != nil { // runs until SIGKILL
		fmt.Fprintln(os.Stderr, err)
	}
	return 1
}

// claimChild claims n jobs of queue, prints their ids as one JSON line, and
// blocks until killed.
func claimChild(ctx context.Context, s *store.Store, queue string, n int) int {
	jobs, err := s.Queue(queue).Claim(ctx, "doomed-child", n, time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	line, _ := json.Marshal(ids(jobs))
	fmt.Println(string(line))
	select {} // hold the claims until SIGKILL
}

// TestKilledWorkerLosesNoJobs: a separate OS process claims a batch and is
// killed with SIGKILL; once the visibility deadline passed, every one of its
// jobs is claimable again.
func TestKilledWorkerLosesNoJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("crashy")
		c := ctx(t)
		const total, claimed = 200, 50
		_, err := q.EnqueueMany(c, make([]store.NewJob, total))
		require.NoError(t, err)

		cmd := startChild(c, "claim", e.dsn, "crashy", claimed)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		var held []int64
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(line)), &held))
		require.Len(t, held, claimed)
		require.NoError(t, cmd.Process.Kill()) // SIGKILL: no cleanup runs
		_ = cmd.Wait()

		// Before the deadline the dead child's jobs stay held.
		rest, err := q.Claim(c, "survivor", total, time.Minute)
		require.NoError(t, err)
		assert.Len(t, rest, total-claimed)
		for _, j := range rest {
			assert.NotContains(t, held, j.ID)
		}
		n, err := q.AckMany(c, rest)
		require.NoError(t, err)
		require.EqualValues(t, total-claimed, n)

		// After it (a store whose clock is two minutes ahead), all of them are
		// claimable again; none was lost.
		later := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(2 * time.Minute) }))
		again, err := later.Queue("crashy").Claim(c, "rescuer", total, time.Minute)
		require.NoError(t, err)
		assert.ElementsMatch(t, held, ids(again))
		for _, j := range again {
			assert.Equal(t, 2, j.Attempts)
		}
	})
}

func publishChild(ctx context.Context, s *store.Store, stream string, n int) int {
	for i := 0; i < n; i++ {
		stamp := time.Now().UnixNano()
		if _, err := s.Stream(stream).Publish(ctx, []byte(fmt.Sprint(stamp))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		time.Sleep(2 * time.Millisecond) // pace the events so each is its own wake
	}
	if err := s.Close(); err != nil { // announces any wake still pending
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestKilledLeaderIsReplacedWithinItsTTL: a scheduler in another OS process
// leads and is killed with SIGKILL, so it never gives its lease up. The
// standby takes over once the lease expires, and the boundaries missed
// meanwhile collapse into one fire: no boundary fires twice.
//
// No wall-clock bound: the child's lease lasts an hour, and the standby
// (whose own TTL is an hour too, so that only the lease's expiry can end
// its sleep) runs on a store whose clock the test sets to shortly before
// that expiry once the child is dead. It must take the lease at its
// expiry and not before (its renewal time, stored by the database, is not
// before the dead lease's expiry): a standby that slept a TTL would wait
// an hour, far past the test's minute, however loaded the machine.
func TestKilledLeaderIsReplacedWithinItsTTL(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("ticks")
		require.NoError(t, s.Schedule("tick").Set(c, store.ScheduleSpec{Spec: "@every 1s", Queue: q.Name()}))
		queued := func() int64 { return queuedJobs(t, c, q) }

		const ttl = time.Hour
		cmd := startChild(c, "lead", e.dsn, "doomed", int(ttl.Milliseconds()))
		require.NoError(t, cmd.Start())
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		require.Eventually(t, func() bool {
			lease, err := s.SchedulerLeader(c)
			require.NoError(t, err)
			return lease.Owner == "doomed"
		}, 30*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return queued() >= 2 }, 10*time.Second, time.Millisecond)

		require.NoError(t, cmd.Process.Kill()) // SIGKILL: the lease is left to expire
		_ = cmd.Wait()
		dead, err := s.SchedulerLeader(c)
		require.NoError(t, err)
		require.Equal(t, "doomed", dead.Owner, "the dead leader's lease is still live")

		// The standby's clock reads 300 ms before the dead lease expires.
		clk := &offsetClock{}
		clk.Advance(time.Until(dead.ExpiresAt) - 300*time.Millisecond)
		sb := e.open(t, store.WithClock(clk.Now))
		standby := sb.Scheduler("standby", store.SchedulerOpts{LeaseTTL: ttl})
		rc, stop := context.WithCancel(c)
		done := make(chan struct{})
		go func() { assert.NoError(t, standby.Run(rc)); close(done) }()
		defer func() { stop(); <-done }()
		require.Eventually(t, standby.Leading, time.Minute, time.Millisecond,
			"the standby sleeps until the dead lease expires, not its TTL (an hour)")
		took, err := sb.SchedulerLeader(c)
		require.NoError(t, err)
		assert.Equal(t, "standby", took.Owner)
		assert.False(t, took.RenewedAt.Before(dead.ExpiresAt),
			"took the lease at %s, before the dead leader's expired at %s", took.RenewedAt, dead.ExpiresAt)
		sq := sb.Queue("ticks")
		before := queuedJobs(t, c, sq)
		require.Eventually(t, func() bool { return queuedJobs(t, c, sq) >= before+2 }, 10*time.Second, time.Millisecond)
		stop()
		<-done

		// The standby's clock sees every job due (it runs an hour ahead).
		jobs, err := sq.Claim(c, "check", 1000, time.Minute)
		require.NoError(t, err)
		assert.Less(t, len(jobs), 20, "the hour of boundaries missed while the lease was dead collapsed into one fire")
		runAts := make([]time.Time, len(jobs))
		for i, j := range jobs {
			runAts[i] = j.RunAt
		}
		slices.SortFunc(runAts, time.Time.Compare)
		for i := 1; i < len(runAts); i++ {
			step := runAts[i].Sub(runAts[i-1])
			assert.True(t, step >= time.Second && step%time.Second == 0,
				"boundaries %s then %s: each fires once, on whole seconds", runAts[i-1], runAts[i])
		}
	})
}
