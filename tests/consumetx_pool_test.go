package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestConsumeTxSharesTheTransactionSlotsWithWorkTx: on PostgreSQL the store
// holds at most one transaction fewer than its pool's connections for the
// transactional handlers it runs, so that one is left for heartbeats,
// claims and settles. A group member's ConsumeTx transaction took no slot
// (attack55 F4): beside a WorkTx handler on a pool of 2 the two
// transactions held both connections, the worker's heartbeats found none,
// the job's claim lapsed while its handler still ran, and another store
// (another process) ran it again. Now every transaction of a handler the
// store runs takes one of the same slots, and waits for it keeping what it
// holds: the job waiting behind the member's transaction keeps its claim,
// and the member waiting behind the job's keeps its partition (a second
// member, in the other store, would take it and deliver its events again
// if the lease ran out). Both directions are forced: phase 1, a WorkTx
// handler holds its transaction past its claim's lease and past the
// member's lease while the member waits; phase 2, the member's handler
// holds its transaction past the lease of a job claimed meanwhile. The
// other store plain-Works the same queue while each job runs or waits:
// every job runs once, and every event is delivered once, its effects
// committed once. On SQLite (the writer slot serialises every
// transaction; a WorkTx one extends its claim itself) the same holds.
func TestConsumeTxSharesTheTransactionSlotsWithWorkTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t, store.WithMaxConns(2)) // one slot on PostgreSQL
		other := e.open(t)                    // another process, on its own pool
		const (
			visibility = 2 * time.Second
			// Past a WorkTx claim's lease, and past the member's lease, which
			// only heartbeats keep while the member waits for the slot.
			jobHold = 7 * time.Second
			// Past a job's lease, short of what is left of the member's
			// lease when its transaction begins (two thirds of it): on
			// SQLite its heartbeats wait for the writer its own
			// transaction holds, which is SQLite's single writer, not the
			// slots.
			memberHold = 3 * time.Second
			leaseTTL   = 6 * time.Second
		)
		q, st := s.Queue("jobs"), s.Stream("orders")
		e1, err := st.Publish(c, []byte("e1"))
		require.NoError(t, err)
		e2, err := st.Publish(c, []byte("e2"))
		require.NoError(t, err)
		id1, err := q.Enqueue(c, []byte("job1"), store.EnqueueOpts{})
		require.NoError(t, err)

		var wg sync.WaitGroup
		defer wg.Wait() // after cancel, should the test fail halfway
		wc, cancel := context.WithTimeout(c, 90*time.Second)
		defer cancel()
		var mu sync.Mutex
		runs := map[int64][]string{}      // job → who ran it
		delivered := map[int64][]string{} // event offset → which member's handler got it
		acked := map[int64]bool{}
		failed := ""
		fail := func(format string, args ...any) { // under mu
			if failed == "" {
				failed = fmt.Sprintf(format, args...)
			}
			cancel()
		}
		state := func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("runs %v, deliveries %v, acked %v", runs, delivered, acked)
		}
		ran := func(id int64, who string) {
			mu.Lock()
			defer mu.Unlock()
			runs[id] = append(runs[id], who)
			if len(runs[id]) > 1 {
				fail("job %d ran more than once though no handler failed: %v", id, runs[id])
			}
		}
		got := func(off int64, who string) {
			mu.Lock()
			defer mu.Unlock()
			delivered[off] = append(delivered[off], who)
			if len(delivered[off]) > 1 {
				fail("event %d delivered more than once: %v", off, delivered[off])
			}
		}
		// await waits for ch, or fails the test with what happened so far.
		await := func(ch <-chan struct{}, what string) {
			t.Helper()
			select {
			case <-ch:
			case <-wc.Done():
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("waiting for %s: %s (%s)", what, failed, fmt.Sprint(runs, delivered))
			}
		}
		// until polls cond (reads of the other store) until it holds.
		until := func(what string, cond func() bool) {
			t.Helper()
			for !cond() {
				select {
				case <-time.After(20 * time.Millisecond):
				case <-wc.Done():
					t.Fatalf("waiting for %s: %s", what, state())
				}
			}
		}
		jobIn, memberIn := make(chan struct{}), make(chan struct{})
		job1Done, allDone := make(chan struct{}), make(chan struct{})
		var allOnce sync.Once
		claimed2, phase2 := false, false // job 2 claimed; while e1's transaction was open
		var id2 int64

		// The transactional worker: job 1 holds its transaction for
		// jobHold, job 2 only runs.
		wg.Go(func() {
			err := q.WorkTx(wc, store.WorkOpts{Concurrency: 2, Visibility: visibility, Timeout: time.Minute, PollInterval: 50 * time.Millisecond},
				func(ctx context.Context, tx store.Tx, j *store.Job) error {
					ran(j.ID, "tx worker")
					if _, err := s.Stream("effects").PublishTx(ctx, tx, fmt.Appendf(nil, "job %d", j.ID)); err != nil {
						return err
					}
					if j.ID == id1 {
						close(jobIn)
						select {
						case <-time.After(jobHold):
						case <-ctx.Done():
							return context.Cause(ctx)
						}
					}
					j.OnResult(func(r store.JobResult) {
						mu.Lock()
						defer mu.Unlock()
						if r.Outcome == store.OutcomeAcked {
							acked[j.ID] = true
						}
						if j.ID == id1 {
							close(job1Done)
						} else if len(acked) == 2 && len(delivered) == 2 {
							allOnce.Do(func() { close(allDone) })
						}
					})
					return nil
				})
			require.NoError(t, err)
		})
		// otherWork plain-Works the queue in the other store until ctx ends:
		// it gets a job only if the transactional worker's claim lapsed.
		otherWork := func(ctx context.Context) {
			err := other.Queue("jobs").Work(ctx, store.WorkOpts{Visibility: time.Minute, PollInterval: 50 * time.Millisecond},
				func(ctx context.Context, j *store.Job) error {
					ran(j.ID, "other store")
					return nil
				})
			require.NoError(t, err)
		}
		await(jobIn, "job 1's handler")
		// Phase 1: job 1's transaction holds the one slot (SQLite's writer).
		phase1, endPhase1 := context.WithCancel(wc)
		phase1Done := make(chan struct{})
		wg.Go(func() {
			defer close(phase1Done)
			otherWork(phase1)
		})

		// Member a, of this store: it joins, reads both events and waits
		// for the slot (on SQLite its join waits for the writer); its
		// handler holds e1's transaction for memberHold.
		opts := store.GroupOpts{Partitions: 1, LeaseTTL: leaseTTL, SafetyPoll: 200 * time.Millisecond, RetryDelay: 100 * time.Millisecond}
		wg.Go(func() {
			o := opts
			o.Member = "a"
			err := st.Group("g").ConsumeTx(wc, o, func(ctx context.Context, tx store.Tx, ev store.Event) error {
				got(ev.Offset, "a")
				if _, err := s.Stream("effects").PublishTx(ctx, tx, fmt.Appendf(nil, "event %d", ev.Offset)); err != nil {
					return err
				}
				if ev.Offset == e1 {
					close(memberIn)
					select {
					case <-time.After(memberHold):
					case <-ctx.Done():
						return context.Cause(ctx)
					}
					mu.Lock()
					phase2 = claimed2 // the job waited behind this transaction
					mu.Unlock()
				}
				if ev.Offset == e2 {
					mu.Lock()
					if len(acked) == 2 {
						allOnce.Do(func() { close(allDone) })
					}
					mu.Unlock()
				}
				return nil
			})
			require.NoError(t, err)
		})
		g := other.Stream("orders").Group("g")
		until("member a to own the partition", func() bool {
			gs, err := g.Stats(c)
			return err == nil && len(gs.Assignment) == 1 && strings.HasPrefix(gs.Assignment[0].Owner, "a")
		})
		// Member b, of the other store, comes second: it owns nothing
		// unless a's lease runs out, and then delivers a's events again.
		wg.Go(func() {
			o := opts
			o.Member = "b"
			err := g.Consume(wc, o, func(ctx context.Context, ev store.Event) error {
				got(ev.Offset, "b")
				return nil
			})
			require.NoError(t, err)
		})
		await(job1Done, "job 1's result")
		endPhase1()
		await(phase1Done, "the other store's first Work to return")

		// Phase 2: the member's transaction holds the slot; job 2, claimed
		// meanwhile, waits for it past its lease.
		await(memberIn, "member a's handler of e1")
		id2, err = q.Enqueue(wc, []byte("job2"), store.EnqueueOpts{}) // SQLite: once e1's transaction ended
		require.NoError(t, err)
		until("job 2's claim", func() bool {
			j, err := other.Queue("jobs").Job(c, id2)
			return errors.Is(err, store.ErrNotFound) || err == nil && j.State != store.JobPending // claimed, or done and gone
		})
		mu.Lock()
		claimed2 = true
		mu.Unlock()
		wg.Go(func() { otherWork(wc) })
		await(allDone, "every job acked and every event delivered")
		cancel()
		wg.Wait()

		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, failed)
		require.Equal(t, map[int64][]string{id1: {"tx worker"}, id2: {"tx worker"}}, runs)
		require.Equal(t, map[int64][]string{e1: {"a"}, e2: {"a"}}, delivered)
		effects, err := s.Stream("effects").ReadSince(c, 0, 100)
		require.NoError(t, err)
		var said []string
		for _, ev := range effects {
			said = append(said, string(ev.Payload))
		}
		require.ElementsMatch(t, []string{fmt.Sprint("job ", id1), fmt.Sprint("job ", id2), fmt.Sprint("event ", e1), fmt.Sprint("event ", e2)}, said)
		gs, err := g.Stats(c)
		require.NoError(t, err)
		require.Len(t, gs.Assignment, 1)
		require.Equal(t, e2, gs.Assignment[0].Committed, "the member committed both events")
		// On PostgreSQL job 2 is claimed at once and waits for the slot;
		// on SQLite its enqueue waited for e1's transaction.
		t.Logf("job 2 claimed while member a's transaction was open: %v", phase2)
	})
}
