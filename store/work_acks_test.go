package store

import (
	"testing"
	"time"
)

// Two runs of one job in one ack (this worker's claim lapsed and it
// claimed the job again): the ack took the job for the later claim, so
// only that run is reported acked, whichever order the batch holds them
// in; the other lost its claim.
func TestAckedRunsPicksTheLaterClaimOfOneJob(t *testing.T) {
	t0 := time.Now()
	t1 := t0.Add(time.Minute)
	for _, order := range []string{"older first", "later first"} {
		old := &Job{ID: 7, ClaimedAt: &t0}
		later := &Job{ID: 7, ClaimedAt: &t1}
		other := &Job{ID: 8, ClaimedAt: &t0}
		lost := &Job{ID: 9, ClaimedAt: &t0}
		batch := []*Job{old, other, later, lost}
		if order == "later first" {
			batch = []*Job{later, other, old, lost}
		}
		acked := ackedRuns(batch, []int64{8, 7})
		if acked[7] != later {
			t.Errorf("%s: job 7 acked for the run claimed at %v, want the later claim", order, acked[7].ClaimedAt)
		}
		if acked[8] != other {
			t.Errorf("%s: job 8 not acked for its one run", order)
		}
		if run, ok := acked[9]; ok {
			t.Errorf("%s: job 9 the ack did not return is acked for %v", order, run)
		}
	}
}
