package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

type counter struct {
	N int `json:"n"`
}

// increment is the read-modify-publish the lock exists for.
func increment(c context.Context, s *store.Store, t *store.Topic[counter], key string) error {
	return s.InTx(c, func(c context.Context, tx store.Tx) error {
		cur, err := t.Key(key).LockCompactionHeadTx(c, tx)
		if err != nil {
			return err
		}
		next := counter{N: 1}
		if cur != nil {
			next.N = cur.N + 1
		}
		_, err = t.PublishTx(c, tx, &next, store.PublishOpts{Key: key})
		return err
	})
}

// TestFirstUpdatesOfANewKeyCompose: two transactions lock the same new key
// at the same moment (released together by a barrier); the lock serializes
// them, so the second reads the first's value and the result is 2.
func TestFirstUpdatesOfANewKeyCompose(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		topic := s.Topic[counter]("counters")
		c := ctx(t)
		for round := 0; round < 200; round++ {
			key := fmt.Sprint("new-", round)
			start := make(chan struct{})
			errs := make(chan error, 2)
			for range 2 {
				go func() {
					<-start
					errs <- increment(c, s, topic, key)
				}()
			}
			close(start)
			require.NoError(t, <-errs)
			require.NoError(t, <-errs)
			got, err := topic.Key(key).CompactionHead(c)
			require.NoError(t, err)
			require.Equal(t, 2, got.N, "round %d: both increments counted", round)
		}
	})
}

func TestConcurrentIncrementsAreExact(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		topic := s.Topic[counter]("counters")
		c := ctx(t)
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					if err := increment(c, s, topic, "hot"); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, err := topic.Key("hot").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, 1000, got.N)
	})
}

func TestWinnerRule(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		topic := s.Topic[counter]("ranked")
		k := topic.Key("k")
		c := ctx(t)
		publish := func(n int, rank int64) int64 {
			off, err := topic.Publish(c, &counter{N: n}, store.PublishOpts{Key: "k", Rank: rank})
			require.NoError(t, err)
			return off
		}
		head := func() int {
			v, err := k.CompactionHead(c)
			require.NoError(t, err)
			return v.N
		}
		// A headless row accepts any head.
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			v, err := k.LockCompactionHeadTx(c, tx)
			assert.Nil(t, v, "a new key is headless")
			return err
		}))
		_, err := k.CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound, "a headless row has no head")
		publish(1, 5)
		assert.Equal(t, 1, head(), "the headless row took the first value")
		publish(2, 4)
		assert.Equal(t, 1, head(), "a lower rank never replaces a higher one")
		publish(3, 5)
		assert.Equal(t, 3, head(), "equal ranks: the later offset wins")
		publish(4, 9)
		assert.Equal(t, 4, head())
		raw, err := topic.Stream().Key("k").CompactionHead(c)
		require.NoError(t, err)
		assert.EqualValues(t, 9, raw.Rank)
		assert.Equal(t, 1, raw.SchemaVersion)
	})
}

type versioned struct{ V string }

func (versioned) SchemaVersion() int { return 3 }

func TestTombstonesAndHeads(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		topic := s.Topic[versioned]("profiles")
		c := ctx(t)
		for _, k := range []string{"b", "a", "c"} {
			_, err := topic.Publish(c, &versioned{V: k + "1"}, store.PublishOpts{Key: k})
			require.NoError(t, err)
		}
		_, err := topic.Publish(c, &versioned{V: "b2"}, store.PublishOpts{Key: "b"})
		require.NoError(t, err)
		raw, err := topic.Stream().Key("b").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, 3, raw.SchemaVersion, "SchemaVersion() is stored in the head")

		_, err = topic.Publish(c, nil, store.PublishOpts{Key: "c"}) // tombstone
		require.NoError(t, err)
		_, err = topic.Key("c").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound, "a tombstone head reads as deleted")
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			v, err := topic.Key("c").LockCompactionHeadTx(c, tx)
			assert.Nil(t, v)
			return err
		}))

		kvs, err := topic.Heads(c, "", 10)
		require.NoError(t, err)
		require.Len(t, kvs, 2, "deleted keys are left out")
		assert.Equal(t, "a", kvs[0].Key)
		assert.Equal(t, "a1", kvs[0].Value.V)
		assert.Equal(t, "b", kvs[1].Key)
		assert.Equal(t, "b2", kvs[1].Value.V)
		more, err := topic.Heads(c, "a", 1)
		require.NoError(t, err)
		require.Len(t, more, 1)
		assert.Equal(t, "b", more[0].Key)

		_, err = topic.Publish(c, nil, store.PublishOpts{})
		require.ErrorIs(t, err, store.ErrInvalidArgument, "an unkeyed nil message means nothing")
		_, err = topic.Stream().Key("").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrInvalidName)
	})
}

func TestKeyedBatchUpdatesHeads(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("batch")
		c := ctx(t)
		k1, k2 := "k1", "k2"
		offs, err := st.PublishMany(c, []store.Message{{Key: &k1, Payload: []byte("a")}, {Payload: []byte("x")},
			{Key: &k2, Payload: []byte("b")}, {Key: &k1, Payload: []byte("c")}})
		require.NoError(t, err)
		h, err := st.Key("k1").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, offs[3], h.Offset, "the batch's last write to a key is its head")
		assert.Equal(t, "c", string(h.Payload))
		h, err = st.Key("k2").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, offs[2], h.Offset)
	})
}

func TestTrimSparesHeadsOfCompactedStreams(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("compacted")
		c := ctx(t)
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true}))
		old, err := st.PublishWithKey(c, "k", []byte("old"))
		require.NoError(t, err)
		head, err := st.PublishWithKey(c, "k", []byte("new"))
		require.NoError(t, err)
		other, err := st.PublishWithKey(c, "j", []byte("only"))
		require.NoError(t, err)
		last, err := st.Publish(c, []byte("unkeyed"))
		require.NoError(t, err)

		n, err := st.TrimTo(c, last)
		require.NoError(t, err)
		assert.EqualValues(t, 2, n, "only the superseded and the unkeyed event go")
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Equal(t, []int64{head, other}, offsets(evs))
		_ = old
		require.ErrorIs(t, st.Configure(c, store.StreamConfig{Retention: -1}), store.ErrInvalidArgument)
	})
}

func TestPlainPublishFillsAHeadlessRow(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		topic := s.Topic[counter]("fill")
		c := ctx(t)
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			_, err := topic.Key("k").LockCompactionHeadTx(c, tx) // leaves a headless row
			return err
		}))
		_, err := topic.Publish(c, &counter{N: 7}, store.PublishOpts{Key: "k", Rank: -5})
		require.NoError(t, err)
		v, err := topic.Key("k").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, 7, v.N, "a headless row accepts any head, whatever its rank")
	})
}

// A keyed publish whose event an application's trigger skips stored
// nothing: it fails, and the key gets no head. SQLite once read the offset
// as the last inserted rowid without checking a row was inserted, and
// returned offset 0 with a head row pointing at it (fresh-eyes review).
func TestKeyedPublishSkippedByATriggerFails(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("skipped")
		_, err := st.PublishWithKey(c, "k0", []byte("kept"))
		require.NoError(t, err)
		if e.name == "pg" {
			e.execSQL(t, `CREATE FUNCTION public.test_skip_event() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.payload = 'skip'::bytea THEN RETURN NULL; END IF; RETURN NEW; END $$`,
				`CREATE TRIGGER test_skip_event BEFORE INSERT ON alkstore.events FOR EACH ROW EXECUTE FUNCTION public.test_skip_event()`)
		} else {
			e.execSQL(t, `CREATE TRIGGER test_skip_event BEFORE INSERT ON alk_events WHEN NEW.payload = CAST('skip' AS BLOB)
				BEGIN SELECT RAISE(IGNORE); END`)
		}
		_, err = st.PublishWithKey(c, "k1", []byte("skip"))
		require.ErrorContains(t, err, "a trigger skipped the event: nothing was stored")
		require.NotErrorIs(t, err, store.ErrNotFound, "nothing is missing: the write was skipped")
		heads, err := st.Heads(c, "", 10)
		require.NoError(t, err)
		for _, h := range heads {
			assert.NotEqual(t, "k1", h.Key, "a head for an event never stored: %+v", h)
		}
	})
}

// TestConfigureRefusesDurationsBelowAMicrosecond: durations are stored in
// microseconds, so one under 1µs is refused with ErrInvalidArgument naming
// its field before any I/O, as UniqueOpts.ByPeriod is (attack59 F4: a
// Retention or HeadlessTTL of 1-999ns was stored as 0 and failed on the
// table's CHECK with the driver's error; a MinCompactionLag or
// TombstoneRetention of 1ns was silently stored as 0).
func TestConfigureRefusesDurationsBelowAMicrosecond(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("cfg")
		c := ctx(t)
		for field, cfg := range map[string]store.StreamConfig{
			"Retention":          {Retention: time.Nanosecond},
			"HeadlessTTL":        {Compacted: true, HeadlessTTL: 999 * time.Nanosecond},
			"MinCompactionLag":   {MinCompactionLag: time.Nanosecond},
			"TombstoneRetention": {TombstoneRetention: 500 * time.Nanosecond},
		} {
			err := st.Configure(c, cfg)
			require.ErrorIs(t, err, store.ErrInvalidArgument, field)
			assert.ErrorContains(t, err, "StreamConfig."+field, "the error names the field")
		}
		require.NoError(t, st.Configure(c, store.StreamConfig{Retention: time.Microsecond, HeadlessTTL: time.Microsecond,
			MinCompactionLag: time.Microsecond, TombstoneRetention: time.Microsecond}), "1µs is the resolution: stored as it is")
	})
}
