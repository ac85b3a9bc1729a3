package tests

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestInsertSizeIsWhatMaxBatchSizeCounts: store.Insert.Size, which insert
// middleware (alkotel) uses to keep a batch within MaxBatchSize when it
// adds headers, is exactly the size the store's check counts for a batch
// of events, keyed or not, and of jobs, unique or with options of their
// own, headers included; and at least that for an EnqueueMany whose jobs
// share their options (their headers count once there). The batches are
// over the bound, so the check's error says its count, before any I/O.
func TestInsertSizeIsWhatMaxBatchSizeCounts(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		var sizes []int64
		s := e.open(t, store.WithInsertMiddleware(func(next store.InsertFunc) store.InsertFunc {
			return func(ctx context.Context, in *store.Insert) error {
				sizes = append(sizes, in.Size())
				return next(ctx, in)
			}
		}))
		c := ctx(t)
		big := make([]byte, store.MaxPayloadSize)
		n := store.MaxBatchSize/store.MaxPayloadSize + 1
		h := map[string]string{"tenant": "acme", "odd": "<&>\u2028"} // escaped in JSON
		msgs := make([]store.Message, n)
		keyed := make([]store.Message, n)
		alike := make([]store.NewJob, n)
		mixed := make([]store.NewJob, n)
		unique := make([]store.NewJob, n)
		for i := range n {
			k := fmt.Sprint("k", i)
			msgs[i] = store.Message{Payload: big, Headers: h}
			keyed[i] = store.Message{Payload: big, Key: &k}
			alike[i] = store.NewJob{Payload: big, Opts: store.EnqueueOpts{Headers: h}}
			mixed[i] = store.NewJob{Payload: big, Opts: store.EnqueueOpts{Priority: i % 3, Headers: h}}
			unique[i] = store.NewJob{Payload: big, Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: k}, Headers: h}}
		}
		counted := regexp.MustCompile(`the batch of \d+ \w+ is (\d+) bytes`)
		for _, f := range []struct {
			name  string
			exact bool
			call  func() error
		}{
			{"PublishMany", true, func() error { _, err := s.Stream("big").PublishMany(c, msgs); return err }},
			{"PublishMany keyed", true, func() error { _, err := s.Stream("big").PublishMany(c, keyed); return err }},
			{"EnqueueMany mixed", true, func() error { _, err := s.Queue("big").EnqueueMany(c, mixed); return err }},
			{"EnqueueManyUnique", true, func() error { _, err := s.Queue("big").EnqueueManyUnique(c, unique); return err }},
			{"EnqueueMany alike", false, func() error { _, err := s.Queue("big").EnqueueMany(c, alike); return err }},
		} {
			sizes = sizes[:0]
			err := f.call()
			require.ErrorIs(t, err, store.ErrPayloadTooLarge, f.name)
			m := counted.FindStringSubmatch(err.Error())
			require.NotNil(t, m, "%s: %v", f.name, err)
			want, err := strconv.ParseInt(m[1], 10, 64)
			require.NoError(t, err)
			require.Len(t, sizes, 1, f.name)
			if f.exact {
				assert.Equal(t, want, sizes[0], f.name)
			} else {
				assert.GreaterOrEqual(t, sizes[0], want, f.name)
			}
		}
	})
}
