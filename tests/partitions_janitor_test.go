package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// TestOpenReaderDoesNotStopTheJanitor: 30 partitions past retention, 5
// expired jobs, and a reader's transaction left open on events (Begin +
// ReadSinceTx), which every partition drop waits for. A janitor pass with
// the default budget gives up on the drops after one lock timeout and
// still expires the jobs and applies retention; once the reader ends, the
// next pass drops the partitions. PostgreSQL only: SQLite has no
// partitions, and its readers never hold the writer slot.
func TestOpenReaderDoesNotStopTheJanitor(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	s, clk := partitionedStore(t, e, 10)
	_, err := s.Maintenance().CreatePartitions(c, store.PartitionOpts{Size: 10, Ahead: 32})
	require.NoError(t, err)
	old := s.Stream("old")
	require.NoError(t, old.Configure(c, store.StreamConfig{Retention: time.Hour}))
	publishEmpty(t, old, 300) // 30 partitions of 10
	q := s.Queue("jobs")
	for range 5 {
		_, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Minute)})
		require.NoError(t, err)
	}
	clk.Advance(2 * time.Hour)
	require.Eventually(t, func() bool { // the store has seen 1..300 settled
		return len(readAll(t, old)) == 300
	}, 30*time.Second, 10*time.Millisecond)

	tx, err := s.Begin(c)
	require.NoError(t, err)
	_, err = s.Stream("other").ReadSinceTx(c, tx, 0, 10) // holds events and its partitions
	require.NoError(t, err)

	j := janitor.New(s, janitor.Opts{Partitions: store.PartitionOpts{Size: 10, Ahead: 1}})
	r, err := j.RunOnce(c)
	require.NoError(t, err)
	assert.False(t, r.OutOfBudget, "one held lock costs one timeout, not the pass: %+v", r)
	assert.Zero(t, r.PartitionsDropped)
	assert.EqualValues(t, 5, r.JobsExpired, "the other tasks ran")
	require.NoError(t, tx.Rollback(c))

	require.Eventually(t, func() bool {
		r, err := j.RunOnce(c)
		require.NoError(t, err)
		return r.PartitionsDropped > 0
	}, 30*time.Second, 10*time.Millisecond)
}
