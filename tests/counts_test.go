package tests

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Claim refuses an n below 1 with ErrInvalidArgument naming the queue,
// before any I/O: a cancelled context does not matter, the queue is not
// registered (Store.Queues), no job is claimed. An empty answer so always
// means nothing was claimable. Any n from 1 to MaxClaim works; above it
// n is refused too (it was cut to MaxClaim, silently).
// (Before: Claim(0) and Claim(-1) returned no jobs and no error, as a
// paused or drained queue does, and registered the queue.)
func TestClaimRefusesACountBelowOne(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		cancelled, cancel := context.WithCancel(c)
		cancel()
		for _, n := range []int{0, -1, math.MinInt} {
			for _, cc := range []context.Context{c, cancelled} {
				got, err := s.Queue("counted").Claim(cc, "w", n, time.Minute)
				require.ErrorIs(t, err, store.ErrInvalidArgument, "n=%d", n)
				assert.Nil(t, got)
				assert.Contains(t, err.Error(), `alkstore: claim "counted": `)
				assert.Contains(t, err.Error(), "at least 1")
			}
		}
		queues, err := s.Queues(c)
		require.NoError(t, err)
		for _, qi := range queues {
			assert.NotEqual(t, "counted", qi.Name, "a refused claim registered its queue")
		}

		q := s.Queue("counted")
		want, err := q.EnqueueMany(c, make([]store.NewJob, 3))
		require.NoError(t, err)
		_, err = q.Claim(c, "w", 0, time.Minute)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 3, st.Ready, "a refused claim took nothing")
		// Above MaxClaim n is refused (it was cut to MaxClaim, silently).
		for _, n := range []int{store.MaxClaim + 1, 1 << 40, math.MaxInt} {
			_, err := q.Claim(c, "w", n, time.Minute)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "n=%d", n)
			assert.Contains(t, err.Error(), "at most MaxClaim (1048576)")
		}
		jobs, err := q.Claim(c, "w", store.MaxClaim, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, want, ids(jobs), "n above the jobs takes them all")
	})
}

// An empty batch (nil or no elements) writes nothing, does no I/O (a
// cancelled context does not matter), returns an empty, non-nil result
// and never reaches insert middleware, in every batch form: EnqueueMany,
// EnqueueManyUnique, PublishMany, their Tx and typed forms, AckMany. A
// read's limit of 0 or less returns an empty, non-nil result without I/O
// too (TestReadLimitZeroDoesNoIO has ReadSince and ReadFromConsumer).
// (Before: middleware saw empty EnqueueMany and PublishMany batches; Heads
// returned nil.)
func TestEmptyBatchesDoNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		var seen atomic.Int64
		s := e.open(t, store.WithInsertMiddleware(func(next store.InsertFunc) store.InsertFunc {
			return func(ctx context.Context, in *store.Insert) error {
				seen.Add(1)
				return next(ctx, in)
			}
		}))
		c := ctx(t)
		cancelled, cancel := context.WithCancel(c)
		cancel()
		q, st := s.Queue("empty-q"), s.Stream("empty-s")
		typed := s.JobQueue[string]("empty-typed")
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(c) }()

		for _, batch := range [][]store.NewJob{nil, {}} {
			ids, err := q.EnqueueMany(cancelled, batch)
			require.NoError(t, err)
			assert.NotNil(t, ids)
			assert.Empty(t, ids)
			ids, err = q.EnqueueManyTx(cancelled, tx, batch)
			require.NoError(t, err)
			assert.NotNil(t, ids)
			assert.Empty(t, ids)
			placed, err := q.EnqueueManyUnique(cancelled, batch)
			require.NoError(t, err)
			assert.NotNil(t, placed)
			assert.Empty(t, placed)
			placed, err = q.EnqueueManyUniqueTx(cancelled, tx, batch)
			require.NoError(t, err)
			assert.NotNil(t, placed)
			assert.Empty(t, placed)
		}
		for _, batch := range [][]store.TypedJob[string]{nil, {}} {
			ids, err := typed.EnqueueMany(cancelled, batch)
			require.NoError(t, err)
			assert.NotNil(t, ids)
			assert.Empty(t, ids)
		}
		for _, batch := range [][]store.Message{nil, {}} {
			offs, err := st.PublishMany(cancelled, batch)
			require.NoError(t, err)
			assert.NotNil(t, offs)
			assert.Empty(t, offs)
			offs, err = st.PublishManyTx(cancelled, tx, batch)
			require.NoError(t, err)
			assert.NotNil(t, offs)
			assert.Empty(t, offs)
		}
		for _, batch := range [][]*store.Job{nil, {}, {nil}} {
			n, err := q.AckMany(cancelled, batch)
			require.NoError(t, err)
			assert.Zero(t, n)
		}
		for _, limit := range []int{0, -1} {
			heads, err := st.Heads(cancelled, "", limit)
			require.NoError(t, err)
			assert.NotNil(t, heads)
			assert.Empty(t, heads)
			kvs, err := s.Topic[string]("empty-s").Heads(cancelled, "", limit)
			require.NoError(t, err)
			assert.NotNil(t, kvs)
			assert.Empty(t, kvs)
		}
		assert.Zero(t, seen.Load(), "insert middleware saw an empty batch")
		require.NoError(t, tx.Commit(c))

		queues, err := s.Queues(c)
		require.NoError(t, err)
		assert.Empty(t, queues, "an empty batch registered its queue")
		stats, err := q.Stats(c)
		require.NoError(t, err)
		assert.Equal(t, store.QueueStats{}, stats)
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, evs)
	})
}

// A negative SubscribeOpts field is refused with ErrInvalidArgument naming
// the stream, before any I/O, by Subscribe and Follow, as WorkOpts and
// GroupOpts refuse theirs; zero still takes the default. (Before: a
// negative value took the default silently.)
func TestNegativeSubscribeOptionsAreRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		cancelled, cancel := context.WithCancel(c)
		cancel()
		st := s.Stream("opts")
		for _, o := range []store.SubscribeOpts{{Buffer: -1}, {PageSize: -1}, {PageBytes: -1}, {AutoSaveEvery: -1},
			{AutoSaveInterval: -time.Second}, {RetryInterval: -time.Second}, {SafetyPoll: -time.Second}} {
			_, err := st.Subscribe(cancelled, "c", o)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
			assert.Contains(t, err.Error(), `alkstore: subscribe "opts": `)
			if o.AutoSaveEvery == 0 && o.AutoSaveInterval == 0 {
				_, err = st.Follow(cancelled, 0, o)
				require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", o)
			}
		}
		r, err := st.Subscribe(c, "c", store.SubscribeOpts{})
		require.NoError(t, err)
		require.NoError(t, r.Close())
	})
}
