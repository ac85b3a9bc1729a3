package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestLentAckCarriedByTheNextClaim: a worker lends the ack of its
// finished jobs to its next claim, which runs it in its own transaction
// (SQLite: after its stamp; PostgreSQL: in its statement,
// ClaimJobsAndAck). Each round a worker of Concurrency 2 claims jobs A
// and A2 together (a full claim); A's handler returns, A2's stays, so the
// next claim waits for A2's slot up to the last claim's round trip and
// then goes with A's slot, while the ack loop, holding A, waits for it to
// carry A's ack. That claim takes B. The forms:
//
//   - held: A's claim still holds it; the claim's transaction acks exactly
//     A (not A2, still running; not B, which it claims), A ends acked,
//     gone (completed where the queue keeps completed jobs: the round's
//     queue does every other round).
//   - lost: A's claim is taken away (another worker's token, as a lapsed
//     claim another store took again) before A's handler returns: the
//     carried ack must not settle it; A's run reports OutcomeClaimLost,
//     and the row stays running under the other token.
//   - claim fails: the claim carrying A's ack fails (an application's
//     trigger refuses B's stamp): A's ack is not lost with it; A ends
//     acked and gone, and B runs once the trigger lets it.
//
// Whether the ack loop holds A when the claim goes depends on how the
// worker's goroutines are scheduled (it waits for a claim up to 6 ms on
// PostgreSQL, 1 ms on SQLite): a round that did not carry A's ack still
// checks every outcome, and on PostgreSQL, where the carried ack is what
// is tested, the test goes on for up to 20 rounds and fails unless 3 of
// them carried it (it sees the statement's ids). On SQLite (whose lent
// ack store's TestLentAckRunsInTheClaimsTransaction forces) it runs 3
// rounds and logs how many ran an ack inside a claim's transaction.
func TestLentAckCarriedByTheNextClaim(t *testing.T) {
	eachEngineEachForm(t, []string{"held", "lost", "claim fails"}, func(t *testing.T, e *engineEnv, form int) {
		carried, rounds := 0, 0
		for round := 0; round < 20 && carried < 3 && (e.name == "pg" || rounds < 3); round++ {
			if carriedAck(t, e, form, round) {
				carried++
			}
			rounds++
			if t.Failed() {
				return
			}
		}
		if e.name == "pg" {
			require.GreaterOrEqual(t, carried, 3, "the claims carried the lent ack in %d of %d rounds", carried, rounds)
		}
		t.Logf("%d of %d rounds carried the lent ack in the next claim", carried, rounds)
	})
}

// carriedAck runs one round of TestLentAckCarriedByTheNextClaim and
// reports whether the claim after A's carried A's ack.
func carriedAck(t *testing.T, e *engineEnv, form, round int) bool {
	c := ctx(t)
	const held, lost, fails = 0, 1, 2
	keep := round%2 == 1
	name := fmt.Sprintf("carried-%d-%d", form, round)
	poison := "poison-" + name
	var mu sync.Mutex
	var ackIDs []string          // pg: the ids each ClaimJobsAndAck carried
	stamped, inClaim := false, 0 // SQLite: a stamp not yet committed; ack statements after one
	var s *store.Store
	if e.name == "pg" {
		cfg, err := pgxpool.ParseConfig(e.dsn)
		require.NoError(t, err)
		cfg.ConnConfig.Tracer = carriedAckTracer(func(ids string) {
			mu.Lock()
			ackIDs = append(ackIDs, ids)
			mu.Unlock()
		})
		pool, err := pgxpool.NewWithConfig(c, cfg)
		require.NoError(t, err)
		s, err = store.OpenPool(c, pool)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(); pool.Close() })
	} else {
		s = e.openHooked(t, func(name string) {
			mu.Lock()
			defer mu.Unlock()
			switch name {
			case "ClaimJob", "ClaimJobs", "ClaimJobsInRange":
				stamped = true
			case "AckJob", "CompleteJob", "AckJobsCounted", "CompleteJobsCounted",
				"AckJobsOfClaim", "AckJobsOfClaimInRange", "CompleteJobsOfClaim", "CompleteJobsOfClaimInRange":
				if stamped {
					inClaim++
				}
			case "COMMIT", "ROLLBACK":
				stamped = false
			}
		})
	}
	q := s.Queue(name)
	if keep {
		require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
	}
	if form == fails {
		// While refuse holds a row, a claim that takes B fails.
		refuse := "refuse_" + strings.ReplaceAll(name, "-", "_")
		if e.name == "pg" {
			e.execSQL(t, fmt.Sprintf(`CREATE TABLE public.%[1]s (x int)`, refuse), fmt.Sprintf(`INSERT INTO public.%s VALUES (1)`, refuse),
				fmt.Sprintf(`CREATE FUNCTION public.%[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF EXISTS (SELECT 1 FROM public.%[1]s) THEN RAISE EXCEPTION 'injected claim failure'; END IF;
				RETURN NEW; END $$`, refuse),
				fmt.Sprintf(`CREATE TRIGGER %[1]s BEFORE UPDATE ON alkstore.jobs FOR EACH ROW
				WHEN (NEW.state = 'running' AND OLD.state = 'pending' AND NEW.payload = '%[2]s'::bytea) EXECUTE FUNCTION public.%[1]s()`,
					refuse, poison))
			t.Cleanup(func() {
				e.execSQL(t, fmt.Sprintf(`DROP TRIGGER %[1]s ON alkstore.jobs`, refuse), fmt.Sprintf(`DROP FUNCTION public.%s()`, refuse),
					fmt.Sprintf(`DROP TABLE public.%s`, refuse))
			})
		} else {
			e.execSQL(t, fmt.Sprintf(`CREATE TABLE %s (x int)`, refuse), fmt.Sprintf(`INSERT INTO %s VALUES (1)`, refuse),
				fmt.Sprintf(`CREATE TRIGGER %[1]s BEFORE UPDATE ON alk_jobs
				WHEN NEW.state = 'running' AND OLD.state = 'pending' AND CAST(NEW.payload AS TEXT) = '%[2]s'
				  AND EXISTS (SELECT 1 FROM %[1]s) BEGIN SELECT RAISE(ABORT, 'injected claim failure'); END`, refuse, poison))
			t.Cleanup(func() { e.execSQL(t, fmt.Sprintf(`DROP TRIGGER %s`, refuse), fmt.Sprintf(`DROP TABLE %s`, refuse)) })
		}
	}

	a, err := q.Enqueue(c, []byte("a"), store.EnqueueOpts{})
	require.NoError(t, err)
	a2, err := q.Enqueue(c, []byte("a2"), store.EnqueueOpts{})
	require.NoError(t, err)

	results := map[int64][]store.JobResult{}
	reported := make(chan int64, 8)
	startedA, startedA2 := make(chan struct{}), make(chan struct{})
	releaseA, releaseA2, startedB := make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	handler := func(_ context.Context, j *store.Job) error {
		j.OnResult(func(r store.JobResult) {
			mu.Lock()
			results[j.ID] = append(results[j.ID], r)
			mu.Unlock()
			reported <- j.ID
		})
		switch j.ID {
		case a:
			close(startedA)
			<-releaseA
		case a2:
			close(startedA2)
			<-releaseA2
		default:
			startedB <- struct{}{}
		}
		return nil
	}
	wctx, stop := context.WithCancel(c)
	worked := make(chan error, 1)
	go func() {
		worked <- q.Work(wctx, store.WorkOpts{Concurrency: 2, Batch: 2, Worker: "w", Visibility: time.Minute}, handler)
	}()
	stopped := false
	stopWork := func() {
		if !stopped {
			stopped = true
			stop()
			require.NoError(t, <-worked)
		}
	}
	defer stopWork()
	for _, ch := range []chan struct{}{startedA, startedA2} {
		select {
		case <-ch:
		case <-c.Done():
			t.Fatal("the first claim's handlers did not start")
		}
	}
	b, err := q.Enqueue(c, []byte(poisonOr(form == fails, poison)), store.EnqueueOpts{})
	require.NoError(t, err)
	if form == lost {
		// A's claim is another worker's now (its token), as when it lapsed
		// and another store took it again.
		steal := `UPDATE alkstore.jobs SET claim_token = claim_token + 1, worker = 'thief' WHERE id = %d`
		if e.name != "pg" {
			steal = `UPDATE alk_jobs SET claim_token = claim_token + 1, worker = 'thief' WHERE id = %d`
		}
		e.execSQL(t, fmt.Sprintf(steal, a))
	}
	close(releaseA)
	waitReported := func(id int64) {
		t.Helper()
		for {
			select {
			case got := <-reported:
				if got == id {
					return
				}
			case <-c.Done():
				t.Fatalf("job %d's run was not reported", id)
			}
		}
	}
	waitReported(a)
	mu.Lock()
	resA := results[a]
	carried := false
	for _, ids := range ackIDs {
		for _, id := range strings.Split(strings.Trim(ids, "{}"), ",") {
			carried = carried || id == fmt.Sprint(a)
		}
	}
	carried = carried || inClaim > 0
	mu.Unlock()

	require.Len(t, resA, 1)
	j, err := q.Job(c, a)
	switch form {
	case held, fails:
		assert.Equal(t, store.OutcomeAcked, resA[0].Outcome, "A's run")
		assert.NoError(t, resA[0].SettleErr)
		if keep {
			if assert.NoError(t, err, "A is kept") {
				assert.Equal(t, store.JobCompleted, j.State)
			}
		} else {
			assert.True(t, errors.Is(err, store.ErrNotFound), "A is gone: %v", err)
		}
	case lost:
		assert.Equal(t, store.OutcomeClaimLost, resA[0].Outcome, "A's run: its claim was taken")
		if assert.NoError(t, err, "A is not deleted") {
			assert.Equal(t, store.JobRunning, j.State, "A runs under the other claim")
			assert.Equal(t, "thief", j.Worker)
		}
	}
	// A2 still runs under the first claim: nothing settled it.
	j2, err := q.Job(c, a2)
	require.NoError(t, err)
	assert.Equal(t, store.JobRunning, j2.State, "A2 still runs")
	if form == fails {
		// The claim that carried A's ack failed: B was not claimed.
		jb, err := q.Job(c, b)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, jb.State, "B: the claim that took it failed")
		assert.Equal(t, 0, jb.Attempts, "B")
	}
	// B runs (in the failing form once the trigger lets it), then A2
	// ends, and both are acked.
	if form == fails {
		e.execSQL(t, fmt.Sprintf(`DELETE FROM %s`, "refuse_"+strings.ReplaceAll(name, "-", "_")))
	}
	select {
	case <-startedB:
	case <-c.Done():
		t.Fatal("B did not run")
	}
	waitReported(b)
	close(releaseA2)
	waitReported(a2)
	stopWork()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []int64{a2, b} {
		if assert.Len(t, results[id], 1, "job %d", id) {
			assert.Equal(t, store.OutcomeAcked, results[id][0].Outcome, "job %d", id)
		}
	}
	return carried
}

func poisonOr(poisoned bool, poison string) string {
	if poisoned {
		return poison
	}
	return "b"
}

// carriedAckTracer calls f with the ids (the text of a bigint[]) that each
// ClaimJobsAndAck carries, as it starts.
type carriedAckTracer func(ids string)

func (f carriedAckTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if stmtName(d.SQL) == "ClaimJobsAndAck" && len(d.Args) > 0 {
		if ids, ok := d.Args[0].(string); ok {
			f(ids)
		}
	}
	return ctx
}

func (f carriedAckTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
