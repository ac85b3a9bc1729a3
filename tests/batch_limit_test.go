package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestBatchOverTheLimitIsRefusedBeforeAnyIO: a batch whose payloads total
// more than store.MaxBatchSize (61 payloads of MaxPayloadSize, sharing
// one backing array so the test holds 4 MiB) fails with ErrPayloadTooLarge
// naming its total and the limit, in every batch form, before any I/O:
// nothing is stored. On PostgreSQL a batch of about 1 GiB failed minutes
// into the call at pgx's protocol-message limit with an error no sentinel
// matched, and SQLite stored it.
func TestBatchOverTheLimitIsRefusedBeforeAnyIO(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		big := make([]byte, store.MaxPayloadSize)
		n := store.MaxBatchSize/store.MaxPayloadSize + 1
		want := int64(n) * (store.MaxPayloadSize + store.BatchElementOverhead)
		msgs := make([]store.Message, n)
		keyed := make([]store.Message, n)
		alike := make([]store.NewJob, n)
		mixed := make([]store.NewJob, n)
		unique := make([]store.NewJob, n)
		for i := range n {
			k := fmt.Sprint("k", i)
			msgs[i] = store.Message{Payload: big}
			keyed[i] = store.Message{Payload: big, Key: &k}
			alike[i] = store.NewJob{Payload: big}
			mixed[i] = store.NewJob{Payload: big, Opts: store.EnqueueOpts{Priority: i}}
			unique[i] = store.NewJob{Payload: big, Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: k}}}
		}
		st := s.Stream("big")
		q := s.Queue("big")
		inTx := func(fn func(tx store.Tx) error) error {
			return s.InTx(c, func(_ context.Context, tx store.Tx) error { return fn(tx) })
		}
		for _, f := range []struct {
			name, op, kind string
			call           func() error
		}{
			{"PublishMany", "publish many", "messages", func() error { _, err := st.PublishMany(c, msgs); return err }},
			{"PublishMany keyed", "publish many", "messages", func() error { _, err := st.PublishMany(c, keyed); return err }},
			{"PublishManyTx", "publish many", "messages", func() error {
				return inTx(func(tx store.Tx) error { _, err := st.PublishManyTx(c, tx, keyed); return err })
			}},
			{"EnqueueMany", "enqueue many", "jobs", func() error { _, err := q.EnqueueMany(c, alike); return err }},
			{"EnqueueMany mixed", "enqueue many", "jobs", func() error { _, err := q.EnqueueMany(c, mixed); return err }},
			{"EnqueueManyTx", "enqueue many", "jobs", func() error {
				return inTx(func(tx store.Tx) error { _, err := q.EnqueueManyTx(c, tx, alike); return err })
			}},
			{"EnqueueManyUnique", "enqueue many", "jobs", func() error { _, err := q.EnqueueManyUnique(c, unique); return err }},
			{"EnqueueManyUniqueTx", "enqueue many", "jobs", func() error {
				return inTx(func(tx store.Tx) error { _, err := q.EnqueueManyUniqueTx(c, tx, unique); return err })
			}},
		} {
			start := time.Now()
			err := f.call()
			require.ErrorIs(t, err, store.ErrPayloadTooLarge, f.name)
			assert.Contains(t, err.Error(), fmt.Sprintf(`alkstore: %s "big": `, f.op), f.name)
			if !strings.HasPrefix(f.name, "EnqueueManyUnique") { // those count their key's digest too
				assert.Contains(t, err.Error(), fmt.Sprintf("batch of %d %s is %d bytes", n, f.kind, want+extraFor(f.name, n)), f.name)
			}
			assert.Contains(t, err.Error(), fmt.Sprintf("the limit is %d (MaxBatchSize)", store.MaxBatchSize), f.name)
			t.Logf("%s refused in %s: %v", f.name, time.Since(start), err)
		}
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, evs, "no event stored")
		stats, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, stats.Ready+stats.Scheduled, "no job stored")
	})
}

// extraFor is what the form counts beside the payloads and the overhead:
// the keys ("k0".."kN"), and for unique jobs the key's digest and states.
func extraFor(name string, n int) int64 {
	var keys int64
	for i := range n {
		keys += int64(len(fmt.Sprint("k", i)))
	}
	switch name {
	case "PublishMany keyed", "PublishManyTx":
		return keys
	}
	return 0
}
