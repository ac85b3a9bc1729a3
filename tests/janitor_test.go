package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// offsetClock is real time plus an offset the test moves: events get their
// created_at from the database's clock, so maintenance cut-offs must stay
// comparable with it.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) Now() time.Time          { return time.Now().Add(time.Duration(c.d.Load())) }
func (c *offsetClock) Advance(d time.Duration) { c.d.Add(int64(d)) }

// countingJanitor is the janitor of a test that counts what one pass did:
// its budget, unless o sets one, is an hour instead of the default 2 s of
// wall time, which a loaded machine can spend before the pass has done its
// work (the pass then stops OutOfBudget and its counts come out short).
// Tests of the budget itself set theirs.
func countingJanitor(s *store.Store, o janitor.Opts) *janitor.Janitor {
	if o.Budget == 0 {
		o.Budget = time.Hour
	}
	return janitor.New(s, o)
}

func lockKey(c context.Context, s *store.Store, st *store.Stream, key string) error {
	return s.InTx(c, func(c context.Context, tx store.Tx) error {
		_, err := st.Key(key).LockCompactionHeadTx(c, tx)
		return err
	})
}

// TestJanitorSkipsAHeldHeadlessRow: a transaction holds an expired headless
// row's lock; a janitor pass deletes nothing and never waits for the row.
// What the pass did is checked, not how long it took: the old bound (under
// a second) held with SKIP LOCKED removed from the PostgreSQL delete, whose
// wait the pass's 300 ms budget cut short, and on a loaded machine a pass
// that skips can take longer. On PostgreSQL the budget is an hour and no
// backend of the database may wait for a lock while the pass runs (one
// that does would wait for the holder until the test's deadline: the
// holder rolls back and the test fails). On SQLite the holder holds the
// writer, and the pass gives way at its budget (OutOfBudget); one that
// did not would wait for the holder, which commits only after it.
func TestJanitorSkipsAHeldHeadlessRow(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		st := s.Stream("held")
		c := ctx(t)
		require.NoError(t, lockKey(c, s, st, "k")) // a headless row
		clk.Advance(2 * time.Hour)                 // past the default TTL

		tx, err := s.Begin(c)
		require.NoError(t, err)
		_, err = st.Key("k").LockCompactionHeadTx(c, tx)
		require.NoError(t, err)

		budget := 300 * time.Millisecond
		if e.name == "pg" {
			budget = time.Hour
		}
		type pass struct {
			r   janitor.Report
			err error
		}
		done := make(chan pass, 1)
		go func() {
			r, err := janitor.New(s, janitor.Opts{Budget: budget}).RunOnce(c)
			done <- pass{r, err}
		}()
		var got pass
		if e.name == "pg" {
			pool := e.pool(t)
		running:
			for {
				select {
				case got = <-done:
					break running
				default:
				}
				var waiting int
				require.NoError(t, pool.QueryRow(c, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
				if waiting > 0 {
					require.NoError(t, tx.Rollback(c))
					<-done
					t.Fatal("the janitor waited for the held row")
				}
				time.Sleep(time.Millisecond)
			}
		} else {
			got = <-done
		}
		require.NoError(t, got.err)
		assert.Zero(t, got.r.HeadlessDeleted)
		assert.Equal(t, e.name == "lite", got.r.OutOfBudget, "SQLite gives way to the writer's holder at its budget; PostgreSQL skips the row")
		require.NoError(t, tx.Commit(c))

		stats, err := s.Stats(c)
		require.NoError(t, err)
		require.Len(t, stats.Streams, 1)
		assert.EqualValues(t, 1, stats.Streams[0].Headless, "the held row survived")
	})
}

// TestJanitorDeletesExpiredHeadlessThenLockRecreates: the janitor goes
// first and deletes an expired headless row; a later lock recreates it and
// its transaction completes.
func TestJanitorDeletesExpiredHeadlessThenLockRecreates(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		topic := s.Topic[counter]("recreate")
		c := ctx(t)
		require.NoError(t, topic.Stream().Configure(c, store.StreamConfig{HeadlessTTL: time.Minute}))
		require.NoError(t, lockKey(c, s, topic.Stream(), "k"))
		require.NoError(t, lockKey(c, s, topic.Stream(), "fresh"))
		clk.Advance(30 * time.Second)
		require.NoError(t, lockKey(c, s, topic.Stream(), "fresh")) // locking again refreshes it
		clk.Advance(45 * time.Second)                              // k: 75 s unused, fresh: 45 s

		r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, r.HeadlessDeleted, "only the row past its TTL")

		require.NoError(t, increment(c, s, topic, "k"))
		v, err := topic.Key("k").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, 1, v.N)
	})
}

func TestCompactionRetentionAndTombstones(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		comp := s.Stream("compacted")
		require.NoError(t, comp.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Minute,
			TombstoneRetention: 10 * time.Minute, Retention: time.Hour}))
		plain := s.Stream("plain")
		require.NoError(t, plain.Configure(c, store.StreamConfig{Retention: time.Hour}))

		v1, _ := comp.PublishWithKey(c, "k", []byte("v1"))
		v2, _ := comp.PublishWithKey(c, "k", []byte("v2"))
		j1, _ := comp.PublishWithKey(c, "j", []byte("j1"))
		gone1, _ := comp.PublishWithKey(c, "gone", []byte("x"))
		tomb, _ := comp.PublishWithKey(c, "gone", nil)
		loose, _ := comp.Publish(c, []byte("unkeyed"))
		p1, _ := plain.Publish(c, []byte("p1"))
		offs := func(st *store.Stream) []int64 {
			evs, err := st.ReadSince(c, 0, 100)
			require.NoError(t, err)
			return offsets(evs)
		}
		jan := countingJanitor(s, janitor.Opts{BatchSize: 1}) // batches of one: the loop must drain

		r, err := jan.RunOnce(c)
		require.NoError(t, err)
		assert.Zero(t, r.Compacted, "superseded events younger than the lag stay")
		assert.Equal(t, []int64{v1, v2, j1, gone1, tomb, loose}, offs(comp))

		clk.Advance(2 * time.Minute)
		r, err = jan.RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 2, r.Compacted, "v1 and the value under the tombstone")
		assert.Zero(t, r.TombstonesDeleted, "the tombstone is younger than its retention")
		assert.Equal(t, []int64{v2, j1, tomb, loose}, offs(comp))

		clk.Advance(10 * time.Minute)
		r, err = jan.RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, r.TombstonesDeleted)
		assert.Equal(t, []int64{v2, j1, loose}, offs(comp))
		_, err = comp.Key("gone").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound)

		clk.Advance(2 * time.Hour)
		r, err = jan.RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 2, r.RetentionDeleted, "the unkeyed event and p1")
		assert.Equal(t, []int64{v2, j1}, offs(comp), "retention spares a compacted stream's heads")
		assert.Empty(t, offs(plain))
		_ = p1
		h, err := comp.Key("k").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, "v2", string(h.Payload))
	})
}

func TestJanitorSweepsExpiredJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		for _, q := range []string{"a", "b"} {
			_, err := s.Queue(q).Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Minute)})
			require.NoError(t, err)
		}
		clk.Advance(2 * time.Minute)
		r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 2, r.JobsExpired, "every queue")
	})
}

func TestSeveralJanitorsAtOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		st := s.Stream("many")
		c := ctx(t)
		const rows = 300
		for i := 0; i < rows; i++ {
			require.NoError(t, lockKey(c, s, st, fmt.Sprint("k", i)))
		}
		clk.Advance(2 * time.Hour)
		var total atomic.Int64
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				jan := janitor.New(s, janitor.Opts{BatchSize: 7, Budget: time.Minute})
				r, err := jan.RunOnce(c)
				assert.NoError(t, err)
				total.Add(r.HeadlessDeleted)
			}()
		}
		wg.Wait()
		assert.EqualValues(t, rows, total.Load(), "each row deleted once, by one of them")
	})
}

func TestStatsReportHeadlessRowsExactly(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		st := s.Stream("keys")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true}))
		for i := range 3 {
			require.NoError(t, lockKey(c, s, st, fmt.Sprint("h", i)))
			clk.Advance(10 * time.Second)
		}
		_, err := st.PublishWithKey(c, "valued", []byte("v"))
		require.NoError(t, err)
		last, err := st.Publish(c, []byte("more"))
		require.NoError(t, err)
		require.NoError(t, st.SaveOffset(c, "reader", last-1))
		_, err = s.Queue("jobs").Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		clk.Advance(30 * time.Second) // the oldest headless row is now 60 s old

		stats, err := s.Stats(c)
		require.NoError(t, err)
		require.Len(t, stats.Streams, 1)
		ss := stats.Streams[0]
		assert.Equal(t, "keys", ss.Name)
		assert.True(t, ss.Compacted)
		assert.EqualValues(t, 3, ss.Headless)
		assert.Equal(t, 60*time.Second, ss.OldestHeadless)
		assert.EqualValues(t, 1, ss.Keys)
		assert.EqualValues(t, 2, ss.Events)
		assert.Equal(t, last, ss.HeadOffset)
		assert.Equal(t, []store.ConsumerStats{{Consumer: "reader", Offset: last - 1, Lag: 1}}, ss.Consumers)
		require.Len(t, stats.Queues, 1)
		assert.Equal(t, "jobs", stats.Queues[0].Queue)
		assert.EqualValues(t, 1, stats.Queues[0].Ready)
	})
}

// TestHeadlessRowsCountAndExpireWhateverMadeThem: a key row is headless, for
// Stats and for the janitor's TTL, whether a lock made it (a key never
// published), a trim or retention (a stream that is not compacted losing a
// head's event); and a locked key that then gets a value is not. On
// PostgreSQL each of those statements keeps headless_at (schema 00031), the
// column the janitor's index and Stats read, in step with head_offset.
func TestHeadlessRowsCountAndExpireWhateverMadeThem(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		plain, ret := s.Stream("plain"), s.Stream("ret")
		require.NoError(t, plain.Configure(c, store.StreamConfig{HeadlessTTL: time.Minute}))
		require.NoError(t, ret.Configure(c, store.StreamConfig{HeadlessTTL: time.Minute, Retention: time.Hour}))

		tr, err := plain.PublishWithKey(c, "trimmed", []byte("v"))
		require.NoError(t, err)
		n, err := plain.TrimTo(c, tr) // unheads "trimmed"
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.NoError(t, lockKey(c, s, plain, "filled")) // headless, then a value
		_, err = plain.PublishWithKey(c, "filled", []byte("v"))
		require.NoError(t, err)
		require.NoError(t, lockKey(c, s, plain, "locked"))
		_, err = ret.PublishWithKey(c, "r", []byte("v"))
		require.NoError(t, err)

		headless := func() map[string][2]int64 {
			stats, err := s.Stats(c)
			require.NoError(t, err)
			m := map[string][2]int64{}
			for _, ss := range stats.Streams {
				m[ss.Name] = [2]int64{ss.Keys, ss.Headless}
			}
			return m
		}
		assert.Equal(t, map[string][2]int64{"plain": {1, 2}, "ret": {1, 0}}, headless(), "[keys, headless]")

		clk.Advance(2 * time.Hour) // past the TTL and the retention
		jan := countingJanitor(s, janitor.Opts{})
		r, err := jan.RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 2, r.HeadlessDeleted, "the trimmed and the locked key")
		assert.EqualValues(t, 1, r.RetentionDeleted, "r's event: r's row is now headless")
		assert.Equal(t, map[string][2]int64{"plain": {1, 0}, "ret": {0, 1}}, headless(), "[keys, headless]")

		clk.Advance(2 * time.Minute)
		r, err = jan.RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, r.HeadlessDeleted, "r, a TTL after retention unheaded it")
		h, err := plain.Key("filled").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, []byte("v"), h.Payload)
	})
}

// TestSweepOfEveryQueueEndsEachExpiredJobOnce: the sweep of every queue
// (Maintenance.SweepExpiredJobs; on PostgreSQL a walk of the queues with
// jobs that can expire, which reads a queue's expired range only when the
// queue's first expiry has come) ends expired exactly the expired jobs of
// every queue, pending ones and running ones whose claim lapsed, at most
// a batch a pass, and leaves a job not yet expired and a claim still in
// flight alone, beside queues (named between the others) whose jobs all
// expire later or whose only expired job is a claim in flight.
func TestSweepOfEveryQueueEndsEachExpiredJobOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		const queues = 5
		var expired, waiting, inFlight []int64
		var qs []*store.Queue
		for i := range queues {
			q := s.Queue(fmt.Sprint("sweep-", i))
			qs = append(qs, q)
			soon := store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Minute)}
			// Claimed first (the oldest two): one claim that lapses, one that
			// is still in flight when the jobs expire.
			for _, lease := range []time.Duration{30 * time.Second, 10 * time.Minute} {
				id, err := q.Enqueue(c, nil, soon)
				require.NoError(t, err)
				js, err := q.Claim(c, "w", 1, lease)
				require.NoError(t, err)
				require.Len(t, js, 1)
				require.Equal(t, id, js[0].ID)
				if lease < time.Minute {
					expired = append(expired, id)
				} else {
					inFlight = append(inFlight, id)
				}
			}
			for range 3 {
				id, err := q.Enqueue(c, nil, soon)
				require.NoError(t, err)
				expired = append(expired, id)
			}
			id, err := q.Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Hour)})
			require.NoError(t, err)
			waiting = append(waiting, id)
			// A queue whose jobs all expire later, and one whose only job
			// that expires is claimed for longer.
			later, held := s.Queue(fmt.Sprint("sweep-", i, "-later")), s.Queue(fmt.Sprint("sweep-", i, "-held"))
			qs = append(qs, later, held)
			for range 2 {
				id, err := later.Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Hour)})
				require.NoError(t, err)
				waiting = append(waiting, id)
			}
			id, err = held.Enqueue(c, nil, soon)
			require.NoError(t, err)
			js, err := held.Claim(c, "w", 1, 10*time.Minute)
			require.NoError(t, err)
			require.Len(t, js, 1)
			inFlight = append(inFlight, id)
			id, err = held.Enqueue(c, nil, store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Hour)})
			require.NoError(t, err)
			waiting = append(waiting, id)
		}
		clk.Advance(2 * time.Minute)

		const batch = 3
		var total int64
		for pass := 0; ; pass++ {
			require.Less(t, pass, 100, "the sweep never ends")
			n, err := s.Maintenance().SweepExpiredJobs(c, batch)
			require.NoError(t, err)
			require.LessOrEqual(t, n, int64(batch), "a pass ends at most a batch")
			if n == 0 {
				break
			}
			total += n
		}
		assert.EqualValues(t, len(expired), total, "each expired job once")
		state := func(id int64) store.JobState {
			for _, q := range qs {
				if j, err := q.Job(c, id); err == nil {
					return j.State
				}
			}
			t.Fatalf("job %d not found", id)
			return ""
		}
		for _, id := range expired {
			assert.Equal(t, store.JobExpired, state(id), "job %d", id)
		}
		for _, id := range waiting {
			assert.Equal(t, store.JobPending, state(id), "job %d expires later", id)
		}
		for _, id := range inFlight {
			assert.Equal(t, store.JobRunning, state(id), "job %d's claim is in flight", id)
		}
	})
}

// TestJanitorRefusesNegativeOptions: a negative BatchSize, Budget,
// Interval, NotificationMaxAge or NotificationKeep is refused with
// ErrInvalidArgument naming the field, by RunOnce and Run at once (no
// pass runs) and by client.Start (nothing starts), as README's "Names and
// errors" promises of a negative option; they were taken as the defaults
// silently, and RunOnce ran a pass (attack56b F4). Zero still takes the
// default.
func TestJanitorRefusesNegativeOptions(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		_, err := janitor.New(s, janitor.Opts{}).RunOnce(c)
		require.NoError(t, err, "zero values take the defaults")
		for field, o := range map[string]janitor.Opts{
			"BatchSize":          {BatchSize: -1},
			"Budget":             {Budget: -time.Second},
			"Interval":           {Interval: -time.Minute},
			"NotificationMaxAge": {NotificationMaxAge: -time.Hour},
			"NotificationKeep":   {NotificationKeep: -5},
		} {
			t.Run(field, func(t *testing.T) {
				j := janitor.New(s, o)
				r, err := j.RunOnce(c)
				require.ErrorIs(t, err, store.ErrInvalidArgument)
				assert.ErrorContains(t, err, "alkstore: janitor: ")
				assert.ErrorContains(t, err, "janitor.Opts."+field+" -")
				assert.Zero(t, r, "no pass ran")
				require.ErrorIs(t, j.Run(c), store.ErrInvalidArgument, "Run fails at once")
				require.ErrorIs(t, o.Check(), store.ErrInvalidArgument)

				cl := client.New(s, client.Opts{Janitor: o, NoScheduler: true})
				err = cl.Start(c)
				require.ErrorIs(t, err, store.ErrInvalidArgument)
				assert.ErrorContains(t, err, field)
				cl = client.New(s, client.Opts{Janitor: o, NoJanitor: true})
				require.NoError(t, cl.Start(c), "NoJanitor: Opts.Janitor is not used")
				require.NoError(t, cl.Stop(c))
			})
		}
	})
}
