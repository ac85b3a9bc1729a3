package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A SQLite worker lends the ack of its finished jobs to the claim that
// holds the writer, which runs it in its own transaction after its stamp.
// Whether the ack loop lends in time depends on how its goroutine and the
// claim's are scheduled (tests/TestLentAckSettlesExactlyItsJobs sees it
// happen, or not, with the machine's load); here the claim is held at
// takeLent until the ack loop lent it the batch of the job A that just
// finished, so the lent ack runs every time:
//
//   - held: A's claim still holds it; the claim's transaction acks A and
//     commits once for both.
//   - lapsed, taken again: A's claim lapsed and this very claim took A
//     again (its first in claim order) before the lent ack ran: the lapsed
//     claim's token must settle nothing, not even the row its own
//     transaction just stamped; the ack fails, the transaction rolls back,
//     the claim runs again without it, A's first run is reported
//     OutcomeClaimLost and its second run is acked. The claim held is
//     one that stamped after the clock moved (claimedAgainAfter): under
//     load a claim that read the clock before may reach takeLent after
//     the test armed it, and its lease on A was still valid.
func TestLentAckRunsInTheClaimsTransaction(t *testing.T) {
	for _, lapsed := range []bool{false, true} {
		name := "held"
		if lapsed {
			name = "lapsed, taken again"
		}
		t.Run(name, func(t *testing.T) {
			for round := range 20 {
				lentAckRound(t, lapsed, round)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func lentAckRound(t *testing.T, lapsed bool, round int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var clockMu sync.Mutex
	now := time.Now()
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	s, err := Open(ctx, filepath.Join(t.TempDir(), "lend.db"), WithClock(clock))
	require.NoError(t, err)
	defer s.Close()
	q := s.Queue("lend")
	a, err := q.Enqueue(ctx, []byte("a"), EnqueueOpts{})
	require.NoError(t, err)

	type run struct {
		attempt int
		outcome Outcome
	}
	var mu sync.Mutex
	runs := map[int64][]run{}
	reported := make(chan struct{}, 8)
	started, release := make(chan struct{}), make(chan struct{})
	handler := func(_ context.Context, j *Job) error {
		attempt := j.Attempts
		j.OnResult(func(r JobResult) {
			mu.Lock()
			runs[j.ID] = append(runs[j.ID], run{attempt, r.Outcome})
			mu.Unlock()
			reported <- struct{}{}
		})
		if j.ID == a && attempt == 1 {
			close(started)
			<-release
		}
		return nil
	}

	// The hook holds the claim that finds the test armed until the ack
	// loop lent it a batch: A's, released from inside the hook.
	armed := make(chan struct{})
	var held *lentAck
	lentInTime := false
	var once sync.Once
	var movedTo time.Time // the clock's time once A's claim lapsed
	testHookTakeLent = func(w *worker, l *lentAck) {
		select {
		case <-armed:
		default:
			return
		}
		if lapsed && !claimedAgainAfter(w, a, movedTo) {
			// A claim that read the clock before it moved (a loaded
			// machine delays one to here): it took nothing, or A
			// under a lease still valid then. Not the claim this
			// round is about; the next one is.
			return
		}
		once.Do(func() {
			held = l
			close(release)
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				w.lendMu.Lock()
				lent := w.lent != nil
				w.lendMu.Unlock()
				if lent {
					lentInTime = true
					return
				}
			}
		})
	}
	defer func() { testHookTakeLent = nil }()

	wctx, stop := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() {
		worked <- q.Work(wctx, WorkOpts{Concurrency: 2, Worker: "w", Visibility: time.Minute}, handler)
	}()
	stopped := false
	defer func() { // before the hook is reset: the worker's claims call it
		if !stopped {
			stop()
			<-worked
		}
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("A's handler did not start")
	}
	if lapsed {
		clockMu.Lock()
		now = now.Add(2 * time.Minute)
		movedTo = now
		clockMu.Unlock()
	}
	close(armed)
	b, err := q.Enqueue(ctx, []byte("b"), EnqueueOpts{}) // wakes the worker: a claim of its free slot
	require.NoError(t, err)
	want := 2 // A's first run and B
	if lapsed {
		want = 3 // and A's second run
	}
	for range want {
		select {
		case <-reported:
		case <-ctx.Done():
			t.Fatalf("round %d: not every run was reported", round)
		}
	}
	stop()
	stopped = true
	require.NoError(t, <-worked)

	require.True(t, lentInTime, "round %d: the ack loop lent no batch to the held claim", round)
	require.NotNil(t, held)
	assert.True(t, held.taken, "round %d: the claim took the lent batch", round)
	mu.Lock()
	defer mu.Unlock()
	if !lapsed {
		assert.True(t, held.acked, "round %d: the claim's transaction acked the lent batch", round)
		assert.Equal(t, []int64{a}, held.ids, "round %d", round)
		assert.Equal(t, []run{{1, OutcomeAcked}}, runs[a], "round %d: A", round)
	} else {
		assert.False(t, held.acked, "round %d: a lapsed claim's token acked in the claim's transaction", round)
		got := runs[a]
		if len(got) == 2 && got[0].attempt > got[1].attempt { // a run's report may come after the next run's
			got[0], got[1] = got[1], got[0]
		}
		assert.Equal(t, []run{{1, OutcomeClaimLost}, {2, OutcomeAcked}}, got, "round %d: A's runs", round)
	}
	assert.Equal(t, []run{{1, OutcomeAcked}}, runs[b], "round %d: B", round)
	for _, id := range []int64{a, b} {
		_, err := q.Job(ctx, id)
		assert.ErrorIs(t, err, ErrNotFound, "round %d: job %d is settled", round, id)
	}
}

// claimedAgainAfter reports whether w's latest claim, the one calling
// takeLent, took job a first under a lease that runs out after movedTo:
// a claim stamped after the clock moved there, taking a's lapsed claim.
func claimedAgainAfter(w *worker, a int64, movedTo time.Time) bool {
	w.recent.mu.Lock()
	defer w.recent.mu.Unlock()
	last := w.recent.claims[(w.recent.next+recentClaimsKept-1)%recentClaimsKept]
	first := last.first
	if last.ids != nil {
		first = last.ids[0]
	}
	return last.token != 0 && first == a && last.expires.After(movedTo)
}
