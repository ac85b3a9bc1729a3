package alktest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/store"
)

type order struct {
	ID    int      `json:"id"`
	Email string   `json:"email"`
	Items []string `json:"items"`
}

// A failure lists the queue's jobs and says how the closest one differs.
func TestFailureListsCandidatesAndClosestDiff(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[order]("orders")
		_, err := q.Enqueue(ctx, order{ID: 1, Email: "a@x", Items: []string{"tea"}}, store.EnqueueOpts{})
		require.NoError(t, err)
		closest, err := q.Enqueue(ctx, order{ID: 2, Email: "b@x", Items: []string{"tea", "cake"}}, store.EnqueueOpts{Priority: 4})
		require.NoError(t, err)
		_, err = q.Queue().Enqueue(ctx, []byte("\xff\xfe"), store.EnqueueOpts{})
		require.NoError(t, err)

		msg := failed(func(tb testing.TB) {
			alktest.RequireEnqueued(ctx, tb, q, alktest.Payload(order{ID: 2, Email: "b@y", Items: []string{"tea", "pie"}}))
		})
		assert.Contains(t, msg, `no job of queue "orders" matches (3 jobs):`)
		assert.Contains(t, msg, `job 1 pending, priority 0, attempts 0/25: {"id":1,"email":"a@x","items":["tea"]}`)
		assert.Contains(t, msg, `priority 4, attempts 0/25: {"id":2,"email":"b@x","items":["tea","cake"]}`)
		assert.Contains(t, msg, `"\xff\xfe" (does not decode:`)
		assert.Contains(t, msg, "closest: job "+itoa(int(closest))+", whose payload differs from the match in:\n"+
			"\tEmail: want \"b@y\", got \"b@x\"\n\tItems[1]: want \"pie\", got \"cake\"")

		// A function Match cannot say how a job differs: the jobs are listed.
		msg = failed(func(tb testing.TB) {
			alktest.RequireEnqueued(ctx, tb, q, func(_ *store.Job, o order) bool { return o.ID == 7 })
		})
		assert.Contains(t, msg, "(3 jobs):")
		assert.NotContains(t, msg, "closest")

		// Many jobs: the first ones are listed, the rest counted.
		fillOrders(t, q, 30)
		msg = failed(func(tb testing.TB) { alktest.RequireEnqueued(ctx, tb, q, alktest.Payload(order{ID: 99})) })
		assert.Contains(t, msg, "(33 jobs)")
		assert.Contains(t, msg, "... and 13 more")
		assert.Equal(t, 20+1, strings.Count(msg, "\n\tjob ")+1, "twenty jobs listed")

		msg = failed(func(tb testing.TB) {
			alktest.RequireNotEnqueued(ctx, tb, q, alktest.Payload(order{ID: 1, Email: "a@x", Items: []string{"tea"}}))
		})
		assert.Contains(t, msg, `job 1 of queue "orders" matches, want none: job 1 pending`)

		// A big payload is cut in the listing.
		big := s.JobQueue[order]("big-orders")
		_, err = big.Enqueue(ctx, order{ID: 3, Email: strings.Repeat("x", 1<<20)}, store.EnqueueOpts{})
		require.NoError(t, err)
		msg = failed(func(tb testing.TB) { alktest.RequireEnqueued(ctx, tb, big, alktest.Payload(order{ID: 3})) })
		assert.Contains(t, msg, "... (1048608 bytes)", "the payload, cut")
		assert.Contains(t, msg, "... (1048578 bytes)", "the Email field, cut")
		assert.Less(t, len(msg), 20_000)
	})
}

func fillOrders(t *testing.T, q *store.JobQueue[order], n int) {
	for i := range n {
		_, err := q.Enqueue(context.Background(), order{ID: 100 + i}, store.EnqueueOpts{})
		require.NoError(t, err)
	}
}

// The store forms read one snapshot: a job deleted while the read is
// under way (here, from the Match, between the first page and the next) is
// still seen, as it was when the read began.
func TestRequireEnqueuedReadsOneSnapshot(t *testing.T) {
	eachEngine(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q := s.JobQueue[welcome]("snapshot")
		fill(t, q, 1500, welcome{User: 1}) // more than one page
		id, err := q.Enqueue(ctx, welcome{User: 2}, store.EnqueueOpts{})
		require.NoError(t, err)
		deleted := false
		j := alktest.RequireEnqueued(ctx, t, q, func(_ *store.Job, v welcome) bool {
			if !deleted {
				require.NoError(t, q.Queue().Delete(ctx, id))
				deleted = true
			}
			return v.User == 2
		})
		assert.Equal(t, id, j.ID)
		alktest.RequireNotEnqueued(ctx, t, q, alktest.Payload(welcome{User: 2}))
	})
}
