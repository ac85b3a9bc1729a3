package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestClaimsOfEveryLengthStampEachJobOnce: a claim stamps the jobs it
// chose, and only those, whatever their number. On SQLite ClaimJobs binds
// the ids as a list (sqlc.slice) sent in lists whose lengths are multiples
// of 16, NULLs after the ids, in runs of at most 128 ids (db/lite's
// ClaimJobsOn): lengths at, below and above each edge, and claims of
// several runs, each take the ordered prefix of the queue, with the
// claim's token on each of its jobs and on no other.
func TestClaimsOfEveryLengthStampEachJobOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		lengths := []int{1, 2, 15, 16, 17, 31, 100, 127, 128, 129, 255, 256, 300}
		total := 0
		for _, n := range lengths {
			total += n
		}
		q := s.Queue("lists")
		jobs := make([]store.NewJob, total)
		for i := range jobs {
			jobs[i].Payload = []byte(fmt.Sprint(i))
		}
		ids, err := q.EnqueueMany(c, jobs)
		require.NoError(t, err)
		next := 0
		for _, n := range lengths {
			got, err := q.Claim(c, "w", n, time.Minute)
			require.NoError(t, err, "claim of %d", n)
			require.Len(t, got, n, "claim of %d", n)
			for i, j := range got {
				assert.Equal(t, ids[next+i], j.ID, "claim of %d: job %d", n, i)
				assert.Equal(t, fmt.Sprint(next+i), string(j.Payload), "claim of %d: job %d", n, i)
			}
			next += n
			st, err := q.Stats(c)
			require.NoError(t, err)
			require.EqualValues(t, n, st.Running, "after a claim of %d", n)
			require.EqualValues(t, total-next, st.Ready, "after a claim of %d", n)
			// Each job of the claim holds its token: the ack takes every
			// one, and only them (a job stamped by another claim's token,
			// or not stamped, would not be acked).
			acked, err := q.AckMany(c, got)
			require.NoError(t, err)
			require.EqualValues(t, n, acked, "claim of %d", n)
			st, err = q.Stats(c)
			require.NoError(t, err)
			require.Zero(t, st.Running, "after acking a claim of %d", n)
			require.EqualValues(t, total-next, st.Ready, "after acking a claim of %d", n)
		}
	})
}
