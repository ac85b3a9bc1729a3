package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestWorkerReportsTheAcksThatCommitted: a worker's batched ack that fails
// part way reports each job as what happened to it. On PostgreSQL a batch
// holding a lost claim takes a second statement (CompleteJobs), which
// commits on its own after the first's acks did: when the second fails
// (a timeout, 57014, is not split; a trigger's error, P0001, is split in
// halves), the jobs the first acked are gone and must be reported
// completed, not as a failed ack that "will run again". On SQLite a batch
// is acked all or none, and a job whose delete a trigger refuses is found
// by halves. Before the worker kept what the failed ack had committed,
// every job of the PostgreSQL batch was reported failed.
func TestWorkerReportsTheAcksThatCommitted(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		codes := []string{"refused"}
		if e.name == "pg" {
			codes = []string{"57014", "P0001"}
		}
		for _, code := range codes {
			t.Run(code, func(t *testing.T) {
				for round := range 3 {
					workerReportsTheAcksThatCommitted(t, e, fmt.Sprintf("acks%s%d", code, round), code)
				}
			})
		}
	})
}

func workerReportsTheAcksThatCommitted(t *testing.T, e *engineEnv, queue, code string) {
	s := e.open(t)
	c := ctx(t)
	q := s.Queue(queue)
	const n = 12
	ids := make([]int64, 0, n)
	for i := range n {
		p := "held"
		switch i {
		case n - 1:
			p = "lost" // its claim taken away while it runs
		case n / 2:
			p = "refused" // SQLite: its delete refused by a trigger
		}
		id, err := q.Enqueue(c, []byte(p), store.EnqueueOpts{})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	fail := fmt.Sprintf("fail_%s", queue)
	if e.name == "pg" {
		// Only the second statement, which the lost claim makes the batch
		// run, fails: the first's acks commit.
		e.execSQL(t, fmt.Sprintf(`CREATE FUNCTION public.%[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF current_query() LIKE '%%name: CompleteJobs :many%%' THEN
				RAISE EXCEPTION 'injected CompleteJobs failure' USING ERRCODE = '%[2]s'; END IF;
			RETURN NULL; END $$`, fail, code),
			fmt.Sprintf(`CREATE TRIGGER %[1]s BEFORE DELETE OR UPDATE ON alkstore.jobs
			FOR EACH STATEMENT EXECUTE FUNCTION public.%[1]s()`, fail))
		t.Cleanup(func() {
			e.execSQL(t, fmt.Sprintf(`DROP TRIGGER %[1]s ON alkstore.jobs`, fail), fmt.Sprintf(`DROP FUNCTION public.%s()`, fail))
		})
	} else {
		e.execSQL(t, fmt.Sprintf(`CREATE TRIGGER %s BEFORE DELETE ON alk_jobs
			WHEN OLD.queue = '%s' AND CAST(OLD.payload AS TEXT) = 'refused' BEGIN SELECT RAISE(ABORT, 'refused'); END`, fail, queue))
	}
	loseClaim := `UPDATE alkstore.jobs SET state = 'cancelled', claim_token = NULL, claim_expires_at = NULL, finished_at = now() WHERE id = %d`
	if e.name != "pg" {
		loseClaim = `UPDATE alk_jobs SET state = 'cancelled', claim_token = NULL, claim_expires_at = NULL, finished_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) WHERE id = %d`
	}

	var mu sync.Mutex
	results := map[int64]store.JobResult{}
	var started, reported sync.WaitGroup
	started.Add(n)
	reported.Add(n)
	release := make(chan struct{})
	h := func(_ context.Context, j *store.Job) error {
		require.True(t, j.OnResult(func(r store.JobResult) {
			mu.Lock()
			results[j.ID] = r
			mu.Unlock()
			reported.Done()
		}))
		if string(j.Payload) == "lost" {
			// The claim is taken away without the cancel's wake (as when it
			// lapsed and another worker's claim took the job): the worker
			// acks it with the others, and finds it not held.
			e.execSQL(t, fmt.Sprintf(loseClaim, j.ID))
		}
		started.Done()
		<-release // every job in one batched ack
		return nil
	}
	wctx, cancel := context.WithCancel(c)
	done := make(chan error, 1)
	go func() { done <- q.Work(wctx, store.WorkOpts{Concurrency: n, Batch: n}, h) }()
	started.Wait()
	close(release)
	reported.Wait()
	cancel()
	require.NoError(t, <-done)

	for _, id := range ids {
		r := results[id]
		_, err := q.Job(c, id)
		if errors.Is(err, store.ErrNotFound) { // acked: deleted
			assert.True(t, r.Outcome == store.OutcomeAcked && r.State == store.JobCompleted && r.SettleErr == nil,
				"job %d was acked (deleted) but reported outcome %v, state %q, settle error %v", id, r.Outcome, r.State, r.SettleErr)
			continue
		}
		require.NoError(t, err)
		assert.False(t, r.State == store.JobCompleted && r.SettleErr == nil,
			"job %d is still there but was reported acked", id)
	}
}

// TestRequeueLeavesOtherUniqueViolationsAlone: a requeue that meets a
// unique violation that is not a job key's (an application's trigger
// writing a row of its own into a unique column) returns the driver's
// error as it is, not ErrInvalidArgument saying another job took the key
// (the job has none), and RequeueDead does not retry its batch for it.
func TestRequeueLeavesOtherUniqueViolationsAlone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("appunique")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		killJob(t, q, id)
		if e.name == "pg" {
			e.execSQL(t, `CREATE TABLE public.requeue_audit (tag text UNIQUE)`,
				`INSERT INTO public.requeue_audit VALUES ('requeued')`,
				`CREATE FUNCTION public.requeue_audit() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN INSERT INTO public.requeue_audit VALUES ('requeued'); RETURN NEW; END $$`,
				`CREATE TRIGGER requeue_audit BEFORE UPDATE ON alkstore.jobs FOR EACH ROW
				WHEN (OLD.state = 'dead' AND NEW.state = 'pending') EXECUTE FUNCTION public.requeue_audit()`)
		} else {
			e.execSQL(t, `CREATE TABLE requeue_audit (tag TEXT UNIQUE)`,
				`INSERT INTO requeue_audit VALUES ('requeued')`,
				`CREATE TRIGGER requeue_audit BEFORE UPDATE ON alk_jobs
				WHEN OLD.state = 'dead' AND NEW.state = 'pending' BEGIN
				INSERT INTO requeue_audit VALUES ('requeued'); END`)
		}
		for _, call := range []struct {
			name string
			do   func() error
		}{
			{"Requeue", func() error { return q.Requeue(c, id) }},
			{"RequeueDead", func() error { _, err := q.RequeueDead(c); return err }},
		} {
			err := call.do()
			require.Error(t, err, call.name)
			assert.NotErrorIs(t, err, store.ErrInvalidArgument, call.name)
			assert.NotContains(t, err.Error(), "unique key", call.name)
			assert.Contains(t, err.Error(), "requeue_audit", "%s: the driver's error, naming the application's table", call.name)
		}
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, j.State)
	})
}
