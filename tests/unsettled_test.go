package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

// failFirstAck makes the database refuse the ack of job id on its first
// attempt: a real fault in the settle's own statement, not a mock. A
// worker's ack deletes the job (the queue keeps no completed jobs), so a
// trigger raises on that DELETE; the job's next attempt is acked.
// Test-only SQL: the library's own SQL lives in queries/.
func failFirstAck(t *testing.T, e *engineEnv, s *store.Store, id int64) {
	t.Helper()
	c := ctx(t)
	stmts := []string{fmt.Sprintf(`CREATE TRIGGER test_fail_ack BEFORE DELETE ON alk_jobs
		WHEN OLD.id = %d AND OLD.attempts = 1 BEGIN SELECT RAISE(ABORT, 'injected ack fault'); END`, id)}
	if e.name == "pg" {
		stmts = []string{`CREATE FUNCTION public.test_fail_ack() RETURNS trigger LANGUAGE plpgsql
			AS $$ BEGIN RAISE EXCEPTION 'injected ack fault'; END $$`,
			fmt.Sprintf(`CREATE TRIGGER test_fail_ack BEFORE DELETE ON alkstore.jobs FOR EACH ROW
			WHEN (OLD.id = %d AND OLD.attempts = 1) EXECUTE FUNCTION public.test_fail_ack()`, id)}
	}
	tx, err := s.Begin(c)
	require.NoError(t, err)
	for _, stmt := range stmts {
		_, err := tx.Exec(c, stmt)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(c))
}

// A settle the database refuses gives exactly one JobUnsettled event, with
// the database's error in Result.SettleErr, and loses nothing: the job
// runs again once its claim lapses. In Work's batched ack, the refused job
// fails only itself: the jobs batched with it complete (each with one
// JobCompleted), rather than all being reported unsettled and run again.
//
// The batch is forced: a first job's result function holds the ack loop
// while the faulty job and its batch mates return, and the worker has
// claimed a follower into each slot they freed (so each had handed its job
// to the ack loop) before it is let go.
func TestClientJobEventsWhenTheAckFails(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		var ahead atomic.Int64 // moves the store's clock past the claims' lapse
		s := e.open(t, store.WithClock(func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }))
		q := s.Queue("jobs")
		cl := client.New(s, client.Opts{NoScheduler: true, NoJanitor: true})
		all := cl.Subscribe(0)
		defer all.Close()

		const mates = 3
		const slots = mates + 2 // the lead, the faulty job and its mates
		ids := map[int64]string{}
		enqueue := func(k string) int64 {
			id, err := q.Enqueue(c, []byte(k), store.EnqueueOpts{})
			require.NoError(t, err)
			ids[id] = k
			return id
		}
		enqueue("lead")
		faulty := enqueue("faulty")
		for i := range mates {
			enqueue(fmt.Sprint("mate", i))
		}
		failFirstAck(t, e, s, faulty)

		started := make(chan string, 4*slots)
		leadGo, restGo, followersGo := make(chan struct{}), make(chan struct{}), make(chan struct{})
		leadHeld, leadLet := make(chan struct{}), make(chan struct{})
		defer func() { // on a failure, let every handler return so Close does not wait
			for _, ch := range []chan struct{}{leadGo, restGo, followersGo, leadLet} {
				select {
				case <-ch:
				default:
					close(ch)
				}
			}
		}()
		opts := store.WorkOpts{Concurrency: slots, Visibility: time.Hour, PollInterval: 20 * time.Millisecond}
		require.NoError(t, cl.Handle(q, opts, func(ctx context.Context, j *store.Job) error {
			k := string(j.Payload)
			if j.Attempts > 1 {
				started <- k + " again"
				return nil
			}
			started <- k
			switch {
			case k == "lead":
				// Runs on the ack loop, after the lead's ack: holds it.
				j.OnResult(func(store.JobResult) { close(leadHeld); <-leadLet })
				<-leadGo
			case k == "follower":
				<-followersGo
			default:
				<-restGo
			}
			return nil
		}))
		require.NoError(t, cl.Start(c))
		for range slots {
			<-started
		}
		for range slots { // claimed only as slots free up
			enqueue("follower")
		}
		close(leadGo)
		<-leadHeld // the ack loop holds on the lead's result
		close(restGo)
		for range slots { // every slot was freed: each job was handed to the ack loop
			require.Equal(t, "follower", <-started)
		}
		close(leadLet) // the next batch: the faulty job and its mates

		got := map[string][]client.JobEvent{}
		next := func() client.JobEvent {
			select {
			case ev := <-all.C():
				got[ids[ev.Job.ID]] = append(got[ids[ev.Job.ID]], ev)
				return ev
			case <-c.Done():
				t.Fatal("events missing", got)
			}
			return client.JobEvent{}
		}
		for range 2 + mates {
			next()
		}
		require.Len(t, got["lead"], 1)
		require.Len(t, got["faulty"], 1, "%+v", got)
		ev := got["faulty"][0]
		assert.Equal(t, client.JobUnsettled, ev.Kind)
		require.Error(t, ev.Result.SettleErr)
		assert.ErrorContains(t, ev.Result.SettleErr, "injected ack fault")
		assert.Equal(t, store.OutcomeAcked, ev.Result.Outcome)
		for i := range mates {
			evs := got[fmt.Sprint("mate", i)]
			require.Len(t, evs, 1, "mate%d: %+v", i, evs)
			require.Equal(t, client.JobCompleted, evs[0].Kind, "mate%d: %+v", i, evs[0].Result)
			assert.NoError(t, evs[0].Result.SettleErr)
		}
		j, err := q.Job(c, faulty)
		require.NoError(t, err)
		assert.Equal(t, store.JobRunning, j.State, "not lost: held by its claim until it lapses")

		close(followersGo)
		for range slots {
			assert.Equal(t, client.JobCompleted, next().Kind)
		}
		ahead.Store(int64(2 * time.Hour)) // the faulty job's claim has lapsed
		assert.Equal(t, "faulty again", <-started)
		ev = next()
		assert.Equal(t, faulty, ev.Job.ID)
		assert.Equal(t, client.JobCompleted, ev.Kind)
		assert.Equal(t, 2, ev.Job.Attempts)

		require.NoError(t, cl.Stop(c))
		select {
		case ev, ok := <-all.C():
			require.False(t, ok, "an extra event: %+v", ev)
		default:
		}
		assert.Zero(t, all.Dropped())
		_, err = q.Job(c, faulty)
		assert.ErrorIs(t, err, store.ErrNotFound, "acked on its second run")
	})
}
