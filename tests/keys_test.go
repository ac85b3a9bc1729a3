package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestConcurrentKeyedBatchesDoNotDeadlock: several writers publish keyed
// batches that share keys, each in its own order, started together by a
// barrier round after round. Every batch must succeed (no 40P01 on
// Postgres: head rows are locked in one order), and every key's head must
// be its newest event (the winner rule at rank 0).
func TestConcurrentKeyedBatchesDoNotDeadlock(t *testing.T) {
	const writers, keys, rounds = 4, 24, 25
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("shared-keys")
		c := ctx(t)
		for round := range rounds {
			start := make(chan struct{})
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for w := range writers {
				msgs := make([]store.Message, keys)
				for i := range keys {
					k := fmt.Sprintf("k%02d", (i*(2*w+1)+w*7)%keys) // a different permutation per writer
					msgs[i] = store.Message{Key: &k, Payload: fmt.Appendf(nil, "r%d w%d", round, w)}
				}
				wg.Go(func() {
					<-start
					_, errs[w] = st.PublishMany(c, msgs)
				})
			}
			close(start)
			wg.Wait()
			for w, err := range errs {
				require.NoError(t, err, "round %d writer %d", round, w)
			}
		}

		// Read every event back; a read stops at the settled horizon, which may
		// lag an unrelated transaction in the cluster for a moment, so an empty
		// page is not the end: the count is.
		newest := map[string]int64{}
		after, seen := int64(0), 0
		require.Eventually(t, func() bool {
			evs, err := st.ReadSince(c, after, 500)
			require.NoError(t, err)
			for _, ev := range evs {
				newest[*ev.Key] = max(newest[*ev.Key], ev.Offset)
				after = ev.Offset
				seen++
			}
			return seen == writers*keys*rounds
		}, 30*time.Second, time.Millisecond)
		require.Len(t, newest, keys)
		for k, off := range newest {
			h, err := st.Key(k).CompactionHead(c)
			require.NoError(t, err)
			assert.Equal(t, off, h.Offset, "key %s: the newest event is the head", k)
		}
	})
}

// TestConcurrentAckManyInAnyOrder: two acks of the same claimed jobs,
// in opposite orders, started together, round after round: neither fails
// (rows are locked in id order), and every job is acked exactly once.
func TestConcurrentAckManyInAnyOrder(t *testing.T) {
	const jobs, rounds = 40, 15
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("acks")
		c := ctx(t)
		for round := range rounds {
			batch := make([]store.NewJob, jobs)
			for i := range batch {
				batch[i] = store.NewJob{Payload: []byte("j")}
			}
			_, err := q.EnqueueMany(c, batch)
			require.NoError(t, err)
			claimed, err := q.Claim(c, "w", jobs, time.Minute)
			require.NoError(t, err)
			require.Len(t, claimed, jobs)
			reversed := make([]*store.Job, jobs)
			for i, j := range claimed {
				reversed[jobs-1-i] = j
			}
			start := make(chan struct{})
			var acked [2]int64
			var errs [2]error
			var wg sync.WaitGroup
			for i, batch := range [][]*store.Job{claimed, reversed} {
				wg.Go(func() {
					<-start
					acked[i], errs[i] = q.AckMany(c, batch)
				})
			}
			close(start)
			wg.Wait()
			require.NoError(t, errs[0], "round %d", round)
			require.NoError(t, errs[1], "round %d", round)
			assert.EqualValues(t, jobs, acked[0]+acked[1], "round %d: each job acked once", round)
		}
	})
}

// badKeys are keys every keyed entry point rejects with ErrInvalidName on
// both engines.
var badKeys = map[string]string{
	"empty":        "",
	"NUL":          "a\x00b",
	"invalid UTF8": "k\xff\xfe",
	"control":      "line\nbreak",
	"too long":     strings.Repeat("k", store.MaxKeyLen+1),
}

// TestKeysAreValidatedLikeNames: every entry point that takes a key
// rejects a bad one with ErrInvalidName before any I/O, the same on both
// engines: nothing is written, and a transaction that saw the error is
// still usable (Postgres would abort it on a statement error).
func TestKeysAreValidatedLikeNames(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("keys")
		topic := s.Topic[counter]("keys")
		c := ctx(t)
		for name, bad := range badKeys {
			t.Run(name, func(t *testing.T) {
				entry := map[string]func() error{
					"PublishWithKey": func() error { _, err := st.PublishWithKey(c, bad, []byte("v")); return err },
					"PublishMany": func() error {
						ok := "fine"
						_, err := st.PublishMany(c, []store.Message{{Key: &ok, Payload: []byte("v")}, {Key: &bad, Payload: []byte("v")}})
						return err
					},
					"CompactionHead": func() error { _, err := st.Key(bad).CompactionHead(c); return err },
					"TopicKey":       func() error { _, err := topic.Key(bad).CompactionHead(c); return err },
				}
				if bad != "" { // an empty PublishOpts.Key is an unkeyed message; an empty after, "from the first key"
					entry["Topic.Publish"] = func() error { _, err := topic.Publish(c, &counter{N: 1}, store.PublishOpts{Key: bad}); return err }
					entry["Heads after"] = func() error { _, err := topic.Heads(c, bad, 10); return err }
				}
				for what, call := range entry {
					require.ErrorIs(t, call(), store.ErrInvalidName, what)
				}
				require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
					inTx := map[string]func() error{
						"PublishWithKeyTx": func() error { _, err := st.PublishWithKeyTx(c, tx, bad, []byte("v")); return err },
						"PublishManyTx": func() error {
							_, err := st.PublishManyTx(c, tx, []store.Message{{Key: &bad, Payload: []byte("v")}})
							return err
						},
						"LockCompactionHeadTx": func() error { _, err := st.Key(bad).LockCompactionHeadTx(c, tx); return err },
					}
					if bad != "" {
						inTx["PublishTx"] = func() error {
							_, err := topic.PublishTx(c, tx, &counter{N: 1}, store.PublishOpts{Key: bad})
							return err
						}
					}
					for what, call := range inTx {
						require.ErrorIs(t, call(), store.ErrInvalidName, what)
					}
					_, err := st.PublishTx(c, tx, []byte("the transaction still works"))
					return err
				}))
			})
		}
		evs, err := st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		for _, ev := range evs {
			assert.Nil(t, ev.Key, "no keyed event was stored")
		}
		assert.Len(t, evs, len(badKeys), "only the unkeyed events of the transactions")

		longest := strings.Repeat("ключ", store.MaxKeyLen/len("ключ"))
		_, err = st.PublishWithKey(c, longest, []byte("v"))
		require.NoError(t, err, "a key of up to MaxKeyLen bytes of UTF-8 is fine")
		h, err := st.Key(longest).CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, "v", string(h.Payload))
	})
}

// TestDeletedHeadLetsTheKeyTakeNewValues: on a stream that is not
// compacted, trimming (TrimTo) or expiring (retention) a key's head event
// leaves the key headless, so a later value of any rank becomes its head
// and is readable (it was stuck behind the gone, higher-ranked head).
func TestDeletedHeadLetsTheKeyTakeNewValues(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		expectValue := func(topic *store.Topic[counter], want int) {
			t.Helper()
			v, err := topic.Key("k").CompactionHead(c)
			require.NoError(t, err)
			assert.Equal(t, want, v.N)
			kvs, err := topic.Heads(c, "", 10)
			require.NoError(t, err)
			require.Len(t, kvs, 1)
			assert.Equal(t, want, kvs[0].Value.N)
		}

		trimmed := s.Topic[counter]("trimmed")
		head, err := trimmed.Publish(c, &counter{N: 1}, store.PublishOpts{Key: "k", Rank: 5})
		require.NoError(t, err)
		n, err := trimmed.Stream().TrimTo(c, head)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "a stream that is not compacted keeps no head")
		_, err = trimmed.Key("k").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = trimmed.Publish(c, &counter{N: 2}, store.PublishOpts{Key: "k", Rank: 0})
		require.NoError(t, err)
		expectValue(trimmed, 2)

		expired := s.Topic[counter]("expired")
		require.NoError(t, expired.Stream().Configure(c, store.StreamConfig{Retention: time.Hour}))
		_, err = expired.Publish(c, &counter{N: 1}, store.PublishOpts{Key: "k", Rank: 5})
		require.NoError(t, err)
		clk.Advance(2 * time.Hour)
		n, err = s.Maintenance().ApplyRetention(c, 100)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "retention deletes the head's event")
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			v, err := expired.Key("k").LockCompactionHeadTx(c, tx)
			assert.Nil(t, v, "the key is headless")
			if err != nil {
				return err
			}
			_, err = expired.PublishTx(c, tx, &counter{N: 3}, store.PublishOpts{Key: "k", Rank: -1})
			return err
		}))
		expectValue(expired, 3)

		stats, err := s.Stats(c)
		require.NoError(t, err)
		for _, st := range stats.Streams {
			assert.EqualValues(t, 1, st.Keys, "%s: one key with a head", st.Name)
			assert.Zero(t, st.Headless, "%s: the new value filled the headless row", st.Name)
		}
	})
}

// TestConcurrentOpensMigrateAFreshDatabaseOnce: several stores (separate
// connections, as separate processes have) open one fresh database at the
// same moment, round after round. Every Open succeeds, and each migration
// is recorded once: the first to take the database migrates, the others
// wait for it and find the schema up to date.
func TestConcurrentOpensMigrateAFreshDatabaseOnce(t *testing.T) {
	emptyDatabases(t)
	const opens = 6
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		rounds, versions := 12, "alk_goose_db_version"
		if e.name == "pg" {
			rounds, versions = 2, "alkstore.goose_db_version" // a fresh database per round is costly; pg's advisory lock is simple
		}
		for round := range rounds {
			fresh := newEnv(t, e.name)
			start := make(chan struct{})
			stores := make([]*store.Store, opens)
			errs := make([]error, opens)
			var wg sync.WaitGroup
			for i := range opens {
				wg.Go(func() {
					<-start
					stores[i], errs[i] = store.Open(ctx(t), fresh.dsn)
				})
			}
			close(start)
			wg.Wait()
			for i, s := range stores {
				if s != nil {
					defer s.Close()
				}
				require.NoError(t, errs[i], "round %d open %d", round, i)
			}
			_, err := stores[0].Stream("s").Publish(ctx(t), []byte("works"))
			require.NoError(t, err)
			var rows, distinct int
			require.NoError(t, stores[0].InTx(ctx(t), func(c context.Context, tx store.Tx) error {
				return tx.QueryRow(c, "SELECT count(*), count(DISTINCT version_id) FROM "+versions+" WHERE is_applied").Scan(&rows, &distinct)
			}))
			assert.Equal(t, distinct, rows, "round %d: every version applied once", round)
		}
	})
}

func init() {
	childVerbs["open"] = func(ctx context.Context, s *store.Store, _ string, _ int) int {
		return 0 // runChild opened (and migrated) the store: that is the whole job
	}
}

// TestProcessesOpenAFreshSQLiteFileTogether: the same race between real
// processes. Each round starts its children back to back on a new file;
// every one must open it. (SQLite only: PostgreSQL's migration lock is
// shared by the server, so processes add nothing the test above does not
// show there.)
func TestProcessesOpenAFreshSQLiteFileTogether(t *testing.T) {
	parallelTest(t)
	const rounds, children = 3, 4
	for round := range rounds {
		path := filepath.Join(t.TempDir(), "fresh.db")
		cmds := make([]*os.Process, 0, children)
		var waits []func() error
		for range children {
			cmd := startChild(ctx(t), "open", path, "-", 0)
			require.NoError(t, cmd.Start())
			cmds = append(cmds, cmd.Process)
			waits = append(waits, cmd.Wait)
		}
		for i, wait := range waits {
			require.NoError(t, wait(), "round %d child %d (pid %d)", round, i, cmds[i].Pid)
		}
	}
}
