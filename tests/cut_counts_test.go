package tests

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// cancelAfter is a statement hook that cancels a context once the nth
// statement named name has ended.
type cancelAfter struct {
	name   string
	nth    int
	cancel context.CancelFunc

	mu  sync.Mutex
	ran int
}

func (h *cancelAfter) hook(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if name == h.name {
		if h.ran++; h.ran == h.nth {
			h.cancel()
		}
	}
}

// TestMaintenanceCountsWhatCommittedWhenCut: a maintenance pass walks its
// streams in name order and commits each stream's deletes (each window's,
// for compaction) on their own, so a pass whose context ends after stream
// a's deletes committed and before stream b's still reports a's rows with
// the error: the janitor's counts (Report.HeadlessDeleted,
// TombstonesDeleted, Compacted, RetentionDeleted) are not lost when its
// budget ends mid-pass (checked through a janitor pass for the first). Before, each returned 0 with the error (the
// store's run drops the value), as DropExpiredPartitions did
// (TestPartitionDropsCountedWhenCut). A statement hook cancels the context
// right after b's first statement ended (for the headless rows, after a's
// one auto-commit delete): a's deletes have committed, b's fail.
func TestMaintenanceCountsWhatCommittedWhenCut(t *testing.T) {
	type pass struct {
		name string
		// stmt is the statement after whose nth run the context ends.
		stmt string
		nth  int
		// setup gives streams a and b one row each for the pass, and
		// moves the clock past their expiry.
		setup func(t *testing.T, s *store.Store, clk *offsetClock)
		run   func(c context.Context, s *store.Store) (int64, error)
		// left is what stays of stream name's rows for the pass.
		left func(t *testing.T, s *store.Store, name string) int
	}
	c := func(t *testing.T) context.Context { return ctx(t) }
	events := func(t *testing.T, s *store.Store, name string) int {
		evs, err := s.Stream(name).ReadSince(ctx(t), 0, 100)
		require.NoError(t, err)
		return len(evs)
	}
	settled := func(t *testing.T, s *store.Store, want int) {
		// On PostgreSQL compaction walks only below the settled horizon:
		// wait for it to pass every event (a read is cut there).
		require.Eventually(t, func() bool { return events(t, s, "a")+events(t, s, "b") == want }, 30*time.Second, 10*time.Millisecond)
	}
	headless := func(t *testing.T, s *store.Store, clk *offsetClock) {
		for _, name := range []string{"a", "b"} {
			require.NoError(t, lockKey(c(t), s, s.Stream(name), "k")) // a headless row
		}
		clk.Advance(2 * time.Hour) // past the default TTL
	}
	headlessLeft := func(t *testing.T, s *store.Store, name string) int {
		stats, err := s.Streams(ctx(t))
		require.NoError(t, err)
		for _, st := range stats {
			if st.Name == name {
				return int(st.Headless)
			}
		}
		return 0
	}
	passes := []pass{{
		name: "headless", stmt: "DeleteExpiredHeadless", nth: 1, setup: headless, left: headlessLeft,
		run: func(c context.Context, s *store.Store) (int64, error) {
			return s.Maintenance().DeleteExpiredHeadless(c, 100)
		},
	}, {
		// The same through a janitor pass (its first row task): its
		// Report counts them beside the error.
		name: "janitor", stmt: "DeleteExpiredHeadless", nth: 1, setup: headless, left: headlessLeft,
		run: func(c context.Context, s *store.Store) (int64, error) {
			r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
			return r.HeadlessDeleted, err
		},
	}, {
		name: "tombstones", stmt: "ExpiredTombstones", nth: 2,
		setup: func(t *testing.T, s *store.Store, clk *offsetClock) {
			for _, name := range []string{"a", "b"} {
				st := s.Stream(name)
				require.NoError(t, st.Configure(c(t), store.StreamConfig{Compacted: true, TombstoneRetention: time.Minute}))
				_, err := st.PublishWithKey(c(t), "k", nil) // a tombstone head
				require.NoError(t, err)
			}
			clk.Advance(2 * time.Minute)
			_, err := s.Maintenance().CompactSuperseded(c(t), 100) // a tombstone goes once compaction walked past it
			require.NoError(t, err)
		},
		run: func(c context.Context, s *store.Store) (int64, error) {
			return s.Maintenance().DeleteExpiredTombstones(c, 100)
		},
		left: events,
	}, {
		name: "compaction", stmt: "CompactionWindow", nth: 3, // a's window, a's empty next one, b's
		setup: func(t *testing.T, s *store.Store, clk *offsetClock) {
			for _, name := range []string{"a", "b"} {
				st := s.Stream(name)
				require.NoError(t, st.Configure(c(t), store.StreamConfig{Compacted: true, MinCompactionLag: time.Minute}))
				for _, v := range []string{"v1", "v2"} { // v1 superseded
					_, err := st.PublishWithKey(c(t), "k", []byte(v))
					require.NoError(t, err)
				}
			}
			settled(t, s, 4)
			clk.Advance(2 * time.Minute)
		},
		run: func(c context.Context, s *store.Store) (int64, error) {
			return s.Maintenance().CompactSuperseded(c, 100)
		},
		left: func(t *testing.T, s *store.Store, name string) int { return events(t, s, name) - 1 }, // v2 stays
	}, {
		name: "retention", stmt: "RetentionWindow", nth: 2,
		setup: func(t *testing.T, s *store.Store, clk *offsetClock) {
			for _, name := range []string{"a", "b"} {
				st := s.Stream(name)
				require.NoError(t, st.Configure(c(t), store.StreamConfig{Retention: time.Hour}))
				_, err := st.Publish(c(t), []byte("old"))
				require.NoError(t, err)
			}
			clk.Advance(2 * time.Hour)
		},
		run:  func(c context.Context, s *store.Store) (int64, error) { return s.Maintenance().ApplyRetention(c, 100) },
		left: events,
	}}
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		for _, p := range passes {
			t.Run(p.name, func(t *testing.T) {
				e := newEnv(t, e.name)
				cut, cancel := context.WithCancel(ctx(t))
				defer cancel()
				h := &cancelAfter{name: p.stmt, nth: p.nth, cancel: cancel}
				clk := &offsetClock{}
				s := e.openHooked(t, h.hook, store.WithClock(clk.Now))
				p.setup(t, s, clk)
				require.Equal(t, 1, p.left(t, s, "a"))
				require.Equal(t, 1, p.left(t, s, "b"))

				n, err := p.run(cut, s)
				require.ErrorIs(t, err, context.Canceled)
				assert.Zero(t, p.left(t, s, "a"), "a's deletes committed before the cut")
				assert.Equal(t, 1, p.left(t, s, "b"), "b's came after it")
				assert.EqualValues(t, 1, n, "the pass counts a's committed deletes with its error")
			})
		}
	})
}

// TestAckManyCountsWhatCommittedWhenCut: on PostgreSQL an AckMany some of
// whose claims were lost takes two auto-commit statements (AckJobs, then
// CompleteJobs for what it did not delete); a context that ends between
// them leaves the first one's acks committed, and AckMany counts them with
// its error (before: 0, the store's run dropping the count, while the job
// was gone). On SQLite the batch is one transaction: the cut rolls it
// back, and AckMany counts nothing. Either way the count is what
// committed.
func TestAckManyCountsWhatCommittedWhenCut(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		cut, cancel := context.WithCancel(ctx(t))
		defer cancel()
		h := &cancelAfter{name: "AckJobs", nth: 1, cancel: cancel}
		s := e.openHooked(t, h.hook)
		q := s.Queue("acks")
		c := ctx(t)
		_, err := q.EnqueueMany(c, make([]store.NewJob, 2))
		require.NoError(t, err)
		jobs, err := q.Claim(c, "w", 2, time.Hour)
		require.NoError(t, err)
		require.Len(t, jobs, 2)
		require.NoError(t, q.Cancel(c, jobs[1].ID)) // its claim lost: the ack needs its second statement

		n, err := q.AckMany(cut, jobs)
		require.ErrorIs(t, err, context.Canceled)
		_, err = q.Job(c, jobs[0].ID)
		acked := errors.Is(err, store.ErrNotFound)
		assert.Equal(t, e.name == "pg", acked, "PostgreSQL: the first statement committed on its own; SQLite: all or none")
		want := int64(0)
		if acked {
			want = 1
		}
		assert.Equal(t, want, n, "AckMany counts the acks that committed")
	})
}
