package tests

import (
	"context"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestReaderNeverSkipsOutOfOrderCommits: 8 publishers hold each transaction
// open a random moment after publishing, so commits land out of offset
// order, while a reader loops ReadSince from the last offset it saw. The
// reader must see every committed event exactly once, in ascending order.
func TestReaderNeverSkipsOutOfOrderCommits(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		const publishers = 8
		// A connection for each publisher's transaction and one for the
		// reader: pgxpool's default, max(4, cores), let only 4 of the 8
		// transactions be open at once on a 2-core machine.
		s := e.open(t, store.WithMaxConns(publishers+1))
		st := s.Stream("ooo")
		// Beside the other parallel tests, on a loaded machine, pg's 20,000
		// commits took over ctx's two minutes (20 s alone): the run gets
		// ten. A skip still fails 30 s after the publishers end (below).
		c, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()

		total, maxHold := int64(20000), 5*time.Millisecond
		if e.name == "lite" {
			// SQLite's writer slot serializes transactions, so commits cannot
			// land out of offset order there: the run only shows that a reader
			// racing committing writers sees each event once, which a tenth of
			// the events shows as well, at a tenth of the cost (SQLite is Go
			// code, slowed ~40x by -race). A held transaction blocks every other
			// publisher, so hold it far shorter too.
			total, maxHold = 2000, 100*time.Microsecond
		}

		type commit struct{ offset, seq int64 }
		var (
			next      atomic.Int64 // events claimed by publishers
			commitSeq atomic.Int64
			mu        sync.Mutex
			committed []commit
			wg        sync.WaitGroup
			pubErr    atomic.Value
		)
		for p := 0; p < publishers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= total {
					tx, err := s.Begin(c)
					if err != nil {
						pubErr.Store(err)
						return
					}
					off, err := st.PublishTx(c, tx, []byte("e"))
					if err != nil {
						_ = tx.Rollback(c)
						pubErr.Store(err)
						return
					}
					time.Sleep(time.Duration(rand.Int64N(int64(maxHold) + 1)))
					if err := tx.Commit(c); err != nil {
						pubErr.Store(err)
						return
					}
					seq := commitSeq.Add(1)
					mu.Lock()
					committed = append(committed, commit{off, seq})
					mu.Unlock()
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()

		// Read until every committed event has been seen. A skipped event can
		// never be seen again (it is behind the cursor), so a skip ends in the
		// deadline below and fails the test.
		var seen []int64
		last := int64(0)
		var deadline <-chan time.Time
		for {
			if deadline == nil {
				select {
				case <-done:
					deadline = time.After(30 * time.Second)
				default:
				}
			}
			evs, err := st.ReadSince(c, last, 500)
			require.NoError(t, err)
			for _, ev := range evs {
				seen = append(seen, ev.Offset)
				last = ev.Offset
			}
			if deadline == nil || int64(len(seen)) >= total {
				if deadline != nil {
					break
				}
				continue
			}
			select {
			case <-deadline:
				t.Fatalf("the reader saw %d of %d events: some were skipped", len(seen), total)
			default:
			}
		}
		if v := pubErr.Load(); v != nil {
			t.Fatalf("publisher failed: %v", v)
		}

		require.Len(t, committed, int(total))
		want := make([]int64, 0, total)
		for _, cm := range committed {
			want = append(want, cm.offset)
		}
		sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
		require.Equal(t, len(want), len(seen), "the reader saw every committed event exactly once")
		require.Equal(t, want, seen, "in ascending offset order, none skipped")

		// The interleaving happened: some event committed after a higher offset
		// had already committed. The writer slot rules that out on SQLite.
		inversions := 0
		sort.Slice(committed, func(i, j int) bool { return committed[i].offset < committed[j].offset })
		for i := 1; i < len(committed); i++ {
			if committed[i].seq < committed[i-1].seq {
				inversions++
			}
		}
		if e.name == "pg" {
			assert.Greater(t, inversions, 100, "commits must land out of offset order for this test to mean anything")
		}
		t.Logf("%s: %d events, %d commit-order inversions", e.name, total, inversions)
	})
}

// TestOpenTransactionHoldsTheHorizon forces the interleaving once: A draws an
// offset and stays open; B publishes a later offset and commits. A reader
// must not return B's event while A's lower offset may still commit.
func TestOpenTransactionHoldsTheHorizon(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("held")
		c := ctx(t)
		before, err := st.Publish(c, []byte("before"))
		require.NoError(t, err)
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{before}, offsets(evs))

		txA, err := s.Begin(c)
		require.NoError(t, err)
		offA, err := st.PublishTx(c, txA, []byte("A"))
		require.NoError(t, err)

		bDone := make(chan int64, 1)
		go func() {
			off, err := st.Publish(c, []byte("B"))
			assert.NoError(t, err)
			bDone <- off
		}()
		var offB int64
		if e.name == "pg" {
			offB = <-bDone // B commits while A is open
			evs, err := st.ReadSince(c, before, 10)
			require.NoError(t, err)
			assert.Empty(t, evs, "B's event must wait until A's lower offset settles")
		}
		// On SQLite B waits for A's writer slot; either way nothing past
		// "before" is visible yet, and "before" stays visible.
		evs, err = st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Equal(t, []int64{before}, offsets(evs))

		require.NoError(t, txA.Commit(c))
		if e.name == "lite" {
			offB = <-bDone
		}
		assert.Greater(t, offB, offA)
		require.Eventually(t, func() bool {
			evs, err = st.ReadSince(c, before, 10)
			require.NoError(t, err)
			return len(evs) == 2
		}, 30*time.Second, time.Millisecond, "once A commits both events settle")
		assert.Equal(t, []int64{offA, offB}, offsets(evs))
	})
}

// TestRolledBackOffsetIsAPermanentGap: an offset drawn by a transaction that
// rolls back must not hold readers back forever.
func TestRolledBackOffsetIsAPermanentGap(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("gap")
		c := ctx(t)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		_, err = st.PublishTx(c, tx, []byte("gone"))
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(c))
		off, err := st.Publish(c, []byte("kept"))
		require.NoError(t, err)
		var evs []store.Event
		require.Eventually(t, func() bool {
			evs, err = st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			return len(evs) > 0
		}, 30*time.Second, time.Millisecond, "the rolled-back offset must not hold the horizon")
		assert.Equal(t, []int64{off}, offsets(evs))
	})
}

// TestNewerTransactionWithOlderOffsetHoldsTheHorizon forces the case that
// breaks horizons built on a snapshot's xmax: P takes its transaction id
// first; T takes a newer one and draws an offset; P draws a later offset and
// commits. Now no running transaction is older than every completed one
// (xmin == xmax), yet T still owns an offset below P's.
func TestNewerTransactionWithOlderOffsetHoldsTheHorizon(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		createOrdersTable(t, s)
		st := s.Stream("newer")
		c := ctx(t)

		txP, err := s.Begin(c)
		require.NoError(t, err)
		_, err = txP.Exec(c, insertOrder, 1, "P writes first") // P's transaction id
		require.NoError(t, err)

		tDrew := make(chan int64, 1)
		tCommit := make(chan struct{})
		tDone := make(chan error, 1)
		go func() {
			tDone <- s.InTx(c, func(c context.Context, tx store.Tx) error {
				off, err := st.PublishTx(c, tx, []byte("T"))
				if err != nil {
					return err
				}
				tDrew <- off
				<-tCommit
				return nil
			})
		}()

		var offT, offP int64
		if e.name == "pg" {
			offT = <-tDrew // T drew while P is open
			offP, err = st.PublishTx(c, txP, []byte("P"))
			require.NoError(t, err)
			require.NoError(t, txP.Commit(c))
			evs, err := st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			assert.Empty(t, evs, "P's event must wait for T's lower offset")
		} else {
			// SQLite: T waits for P's writer slot, so T draws after P.
			offP, err = st.PublishTx(c, txP, []byte("P"))
			require.NoError(t, err)
			require.NoError(t, txP.Commit(c))
			offT = <-tDrew
		}
		close(tCommit)
		require.NoError(t, <-tDone)

		want := []int64{min(offP, offT), max(offP, offT)}
		var evs []store.Event
		require.Eventually(t, func() bool {
			evs, err = st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			return len(evs) == 2
		}, 30*time.Second, time.Millisecond)
		assert.Equal(t, want, offsets(evs))
	})
}
