package tests

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestAcksOfEveryLengthSettleExactlyTheirJobs: an AckMany settles the jobs
// whose claims it holds, and no other, whatever their number and however
// many claims they come from. On SQLite an auto-commit AckMany runs the
// worker's counted ack: one AckJobsOfClaim a claim token with many jobs in
// the batch (CompleteJobsOfClaim for a queue that keeps completed jobs),
// its jobs' ids sent in lists of multiples of 16, in runs of at most 128,
// or, for each run of 8 or more ids without a gap, as a range
// (AckJobsOfClaimInRange, CompleteJobsOfClaimInRange; db/lite's
// execListed); the other claims' jobs by their pairs (AckJobsCounted,
// CompleteJobsCounted). TestRangesOfIdsSettleAndStampOnlyTheirRuns holds
// the ranges to the runs when a claim's ids in a batch have gaps.
// Lengths at, below and above each edge, under one token and under three
// (the batch's jobs interleaved, as a worker's finish), with and without
// completed-job retention, beside another claim of the queue that is not
// acked; and with the first claim lapsed and taken again by another claim,
// whose jobs the stale claim must not settle though the batch holds a job
// of that claim too.
//
// On SQLite, with every claim held, the acks never fall back to the
// RETURNING forms (AckJobs, CompleteJobs): they would settle the jobs a
// short count missed and hide it; and the claims with many jobs in the
// batch are settled by their lists or ranges.
func TestAcksOfEveryLengthSettleExactlyTheirJobs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		var stmts stmtCounts
		clk := newFakeClock()
		s := e.openHooked(t, stmts.hook, store.WithClock(clk.Now))
		count := stmts.count
		c := ctx(t)
		// claim takes n jobs of q in claims of sizes as even as they go
		// (the first the largest), each under a token of its own.
		claim := func(q *store.Queue, worker string, n, claims int, visibility time.Duration) [][]*store.Job {
			var out [][]*store.Job
			for k := range claims {
				size := n / claims
				if k < n%claims {
					size++
				}
				if size == 0 {
					continue
				}
				got, err := q.Claim(c, worker, size, visibility)
				require.NoError(t, err)
				require.Len(t, got, size)
				out = append(out, got)
			}
			return out
		}
		// interleave lists the claims' jobs as their handlers may finish:
		// one of each in turn.
		interleave := func(claims [][]*store.Job) []*store.Job {
			var batch []*store.Job
			for i := 0; ; i++ {
				more := false
				for _, js := range claims {
					if i < len(js) {
						batch = append(batch, js[i])
						more = true
					}
				}
				if !more {
					return batch
				}
			}
		}
		// settled says whether each job is gone (or completed, when the
		// queue keeps them), and the others still running under the
		// claim that holds them.
		settled := func(name string, q *store.Queue, kept bool, gone, held []*store.Job, holder string) {
			for _, j := range gone {
				got, err := q.Job(c, j.ID)
				if kept {
					require.NoError(t, err, name)
					assert.Equal(t, store.JobCompleted, got.State, "%s: job %d", name, j.ID)
				} else {
					assert.True(t, errors.Is(err, store.ErrNotFound), "%s: job %d still there: %v", name, j.ID, err)
				}
			}
			for _, j := range held {
				got, err := q.Job(c, j.ID)
				require.NoError(t, err, name)
				assert.Equal(t, store.JobRunning, got.State, "%s: job %d", name, j.ID)
				assert.Equal(t, holder, got.Worker, "%s: job %d", name, j.ID)
			}
		}
		const beside = 20 // a claim of the queue that no ack here holds
		ofClaim := []string{"AckJobsOfClaim", "CompleteJobsOfClaim", "AckJobsOfClaimInRange", "CompleteJobsOfClaimInRange"}
		for _, kept := range []bool{false, true} {
			for _, n := range []int{1, 15, 16, 17, 128, 129, 300} {
				for _, tokens := range []int{1, 3} {
					for _, lapse := range []bool{false, true} {
						if lapse && n < tokens {
							continue
						}
						name := fmt.Sprintf("%d jobs under %d claims (kept %v, lapse %v)", n, tokens, kept, lapse)
						q := s.Queue(fmt.Sprintf("acks-%d-%d-%v-%v", n, tokens, kept, lapse))
						if kept {
							require.NoError(t, q.Configure(c, store.QueueConfig{CompletedRetention: time.Hour}))
						}
						_, err := q.EnqueueMany(c, make([]store.NewJob, beside+n))
						require.NoError(t, err)
						other := claim(q, "other", beside, 1, time.Hour)[0]
						var claims [][]*store.Job
						var stale, taken []*store.Job
						if lapse {
							// The first claim lapses and is taken again;
							// the others, made after it, last.
							first := (n + tokens - 1) / tokens
							stale = claim(q, "w", first, 1, time.Minute)[0]
							claims = append(claims, stale)
							if tokens > 1 {
								claims = append(claims, claim(q, "w", n-first, tokens-1, time.Hour)...)
							}
							clk.Advance(2 * time.Minute)
							// The claim that takes the lapsed jobs over also
							// takes a new one, which it finishes first: the
							// batch holds its token too.
							_, err = q.Enqueue(c, nil, store.EnqueueOpts{})
							require.NoError(t, err)
							again, err := q.Claim(c, "again", len(stale)+1, time.Hour)
							require.NoError(t, err)
							require.Len(t, again, len(stale)+1, name)
							taken = again[:len(stale)]
							require.ElementsMatch(t, ids(stale), ids(taken), name)
							claims = append(claims, again[len(stale):])
						} else {
							claims = claim(q, "w", n, tokens, time.Hour)
						}
						batch := interleave(claims)
						held := batch
						if lapse {
							held = interleave(claims[1:])
						}
						fallbacks, lists := count("AckJobs", "CompleteJobs"), count(ofClaim...)
						acked, err := q.AckMany(c, batch)
						require.NoError(t, err, name)
						assert.EqualValues(t, len(held), acked, name)
						if e.name == "lite" && !lapse {
							assert.Equal(t, fallbacks, count("AckJobs", "CompleteJobs"), "%s: the counted ack fell back to the RETURNING forms", name)
							if n/tokens >= 16 {
								assert.Less(t, lists, count(ofClaim...), "%s: no claim's jobs acked by a list or range", name)
							}
						}
						settled(name, q, kept, held, other, "other")
						settled(name, q, kept, nil, taken, "again")
						st, err := q.Stats(c)
						require.NoError(t, err)
						assert.EqualValues(t, beside+len(taken), st.Running, name)
						assert.Zero(t, st.Ready, name)
						if kept {
							assert.EqualValues(t, len(held), st.Completed, name)
						} else {
							assert.Zero(t, st.Completed, name)
						}
						// The claims that took the jobs over, and the one
						// beside, settle theirs.
						acked, err = q.AckMany(c, append(taken, other...))
						require.NoError(t, err, name)
						assert.EqualValues(t, beside+len(taken), acked, name)
						settled(name, q, kept, append(taken, other...), nil, "")
					}
				}
			}
		}
	})
}
