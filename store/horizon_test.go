package store

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pgdb "github.com/alkstore/alkstore/db/pg"
)

// snap builds a snapshot whose next unassigned transaction id is next.
func snap(xmin, next, head int64) pgdb.SettledSnapshotRow {
	xmax := min(next, xmin+1) // xmax (latestCompleted+1) may lag next arbitrarily
	return pgdb.SettledSnapshotRow{Xmin: xmin, Xmax: xmax, XmaxAge: next - xmax, VisibleHead: head}
}

func TestHorizonSettlesCandidatesOnlyAfterTheirTransactionsEnd(t *testing.T) {
	var h horizon
	// Transaction 100 is running; head 10 is a candidate, not yet settled.
	assert.EqualValues(t, 0, h.observe(snap(100, 105, 10), true))
	// 100 still running: nothing settles, a newer candidate queues.
	assert.EqualValues(t, 0, h.observe(snap(100, 110, 20), true))
	// Everything below 105 ended: head 10 settles, 20 still waits for < 110.
	assert.EqualValues(t, 10, h.observe(snap(106, 112, 25), true))
	// Everything below 112 ended: both 20 and 25 settle.
	assert.EqualValues(t, 25, h.observe(snap(112, 115, 30), true))
	// The horizon never moves back, even if the head shrinks (a trim).
	assert.EqualValues(t, 25, h.observe(snap(113, 116, 5), true))
}

func TestHorizonRunningTransactionAboveXmaxHoldsIt(t *testing.T) {
	var h horizon
	// The bug this guards against: xmin == xmax (nothing running below
	// latestCompleted+1) while transaction 105 — newer than every completed
	// one — still runs and may own an offset below head 10.
	row := pgdb.SettledSnapshotRow{Xmin: 100, Xmax: 100, XmaxAge: 6, VisibleHead: 10} // next = 106
	assert.EqualValues(t, 0, h.observe(row, true), "a snapshot with xmin == xmax is not quiet while ids up to next-1 may run")
	assert.EqualValues(t, 0, h.observe(pgdb.SettledSnapshotRow{Xmin: 105, Xmax: 105, XmaxAge: 2, VisibleHead: 10}, true))
	assert.EqualValues(t, 10, h.observe(pgdb.SettledSnapshotRow{Xmin: 106, Xmax: 106, XmaxAge: 0, VisibleHead: 10}, true))
}

func TestHorizonQuietSnapshotSettlesEverythingVisible(t *testing.T) {
	var h horizon
	assert.EqualValues(t, 0, h.observe(snap(100, 105, 10), true))
	assert.EqualValues(t, 40, h.observe(snap(120, 120, 40), true))
	assert.Equal(t, []candidate{{head: 10, next: 105}, {head: 40, next: 120}}, h.cands, "the older one stays for older snapshots")
}

func TestHorizonInTransactionSnapshotsOnlyConsult(t *testing.T) {
	var h horizon
	h.observe(snap(200, 200, 50), true) // settled (50, next 200)
	// An old REPEATABLE READ snapshot (xmin 150) cannot use what a newer
	// snapshot proved: it may not see every event up to 50.
	assert.EqualValues(t, 0, h.observe(snap(150, 160, 30), false))
	// It records nothing, and its own "quiet" look proves nothing either.
	assert.Equal(t, []candidate{{head: 50, next: 200}}, h.cands)
	assert.EqualValues(t, 0, h.observe(snap(150, 150, 30), false))
	// A transaction snapshot newer than the proof uses it.
	assert.EqualValues(t, 50, h.observe(snap(210, 220, 60), false))
}

func TestHorizonIgnoresEpochBoundaryAge(t *testing.T) {
	var h horizon
	row := pgdb.SettledSnapshotRow{Xmin: 1 << 32, Xmax: 1 << 32, XmaxAge: 2147483647, VisibleHead: 10}
	assert.EqualValues(t, 0, h.observe(row, true))
	assert.Empty(t, h.cands)
}

func TestHorizonBoundsPendingCandidates(t *testing.T) {
	var h horizon
	for i := int64(1); i <= 4*maxPending; i++ {
		h.observe(snap(1, 1+i, i), true) // transaction 1 never ends
		require.LessOrEqual(t, len(h.cands), maxPending+1)
	}
	// The newest is kept: once the holder ends, the horizon reaches it.
	assert.EqualValues(t, 4*maxPending, h.observe(snap(2+4*maxPending, 1000, 500), true))
}

// A Tx's offer made while a long transaction holds more than maxPending
// candidates is kept, though candidates with a greater next came before it
// (reads after the Tx took its id), and settles once the holder ends while
// the Tx runs (stop 36 review: it was dropped, and its event waited for the
// Tx's end).
func TestHorizonKeepsAnOfferBehindALongHold(t *testing.T) {
	var h horizon
	for i := int64(1); i <= 3*maxPending; i++ {
		h.observe(snap(1, 1+i, i), true) // transaction 1 holds them all
	}
	// The Tx took id 100 after offset 150 was drawn; reads since saw more.
	for i := int64(0); i < maxPending; i++ {
		h.observe(snap(1, 3*maxPending+2+i, 3*maxPending+1+i), true)
	}
	require.True(t, h.offer(150, 100))
	for i := int64(0); i < 2*maxPending; i++ { // more reads while the Tx runs
		h.observe(snap(1, 1000+i, 400+i), true)
	}
	// Transaction 1 ended; the Tx (100) still runs: xmin 100.
	assert.GreaterOrEqual(t, h.observe(snap(100, 2000, 600), true), int64(150))
}

// An old snapshot (a REPEATABLE READ transaction's) uses the newest
// candidate its own xmin proves, though newer ones have settled since.
func TestHorizonOlderSnapshotUsesAnOlderProof(t *testing.T) {
	var h horizon
	assert.EqualValues(t, 10, h.observe(snap(100, 100, 10), true))
	assert.EqualValues(t, 20, h.observe(snap(110, 110, 20), true))
	assert.EqualValues(t, 30, h.observe(snap(120, 120, 30), true))
	assert.EqualValues(t, 20, h.observe(snap(115, 125, 25), false), "xmin 115 proves (20, 110), not (30, 120)")
	assert.EqualValues(t, 10, h.observe(snap(105, 125, 25), false))
	assert.EqualValues(t, 0, h.observe(snap(99, 125, 25), false))
}

// A candidate from an old snapshot learnt late (old head, new next) is no
// use beside one with a greater head and no greater next, and is dropped.
func TestHorizonKeepsOnlyUsefulCandidates(t *testing.T) {
	var h horizon
	h.observe(snap(100, 100, 10), true)
	h.observe(snap(90, 130, 40), true) // pending: (40, 130)
	h.observe(snap(90, 140, 30), true) // (30, 140) is worse than (40, 130)
	h.observe(snap(90, 130, 45), true) // same next, greater head: replaces (40, 130)
	h.observe(snap(90, 135, 50), true) // (50, 135) stays: greater head, greater next
	h.observe(snap(90, 120, 60), true) // better than both
	assert.Equal(t, []candidate{{head: 10, next: 100}, {head: 60, next: 120}}, h.cands)
}

// Settled candidates are thinned, never all dropped: snapshots of every age
// still find a proof, the newest ones the best.
func TestHorizonThinsItsHistory(t *testing.T) {
	var h horizon
	const n = 10 * maxSettled
	for i := int64(1); i <= n; i++ {
		h.observe(snap(1000+10*i, 1000+10*i, i), true)
	}
	assert.LessOrEqual(t, len(h.cands), maxSettled+1)
	assert.EqualValues(t, n, h.observe(snap(1000+10*n, 1000+10*n, n), false))
	assert.EqualValues(t, n-1, h.observe(snap(1000+10*(n-1), 1000, 0), false), "the newest are kept one by one")
	for _, age := range []int64{2, 10, 100, n - 1} {
		hz := h.observe(snap(1000+10*(n-age), 1000, 0), false)
		assert.Positive(t, hz, "a snapshot %d candidates old finds one", age)
		assert.LessOrEqual(t, hz, n-age)
		assert.GreaterOrEqual(t, hz, n-3*age, "at a grain that grows with age")
	}
}

// proofHorizon is what ReadEvents computes in the server from proof's
// values for a snapshot with the given xmin (without its own candidate):
// the head after the last next <= xmin (width_bucket(xmin, nexts) counts
// those, given nexts ascending), or floor when greater.
func proofHorizon(floor int64, nexts, heads []int64, xmin int64) int64 {
	k := sort.Search(len(nexts), func(i int) bool { return nexts[i] > xmin }) // width_bucket
	if k == 0 {
		return floor // heads[0] in SQL (arrays start at 1): NULL, which GREATEST skips
	}
	return max(floor, heads[k-1])
}

// ascending says whether proof's candidates ascend strictly in next and in
// head, which the statement's width_bucket needs.
func ascending(nexts, heads []int64) bool {
	for i := 1; i < len(nexts); i++ {
		if nexts[i] <= nexts[i-1] || heads[i] <= heads[i-1] {
			return false
		}
	}
	return len(nexts) == len(heads)
}

// What a read sends to the server proves, for its snapshot, the horizon
// the tracker itself would give it: every candidate (a transaction's
// snapshot, of any xmin), or the settled floor and the pending candidates
// (an auto-commit snapshot, whose xmin is no less than any seen).
func TestHorizonProofGivesTheTrackersHorizon(t *testing.T) {
	var h horizon
	next, xmin, head := int64(1000), int64(1000), int64(0)
	for i := range 400 {
		// Transactions start and end out of step; heads grow; now and
		// then a quiet snapshot.
		next += int64(1 + i%7)
		head += int64(i % 5)
		if i%3 == 0 {
			xmin = min(next, xmin+int64(i%11))
		}
		if i%29 == 0 {
			xmin = next
		}
		h.observe(snap(xmin, next, head), true)
		for _, x := range []int64{h.xmin, h.xmin + 3, next, next + 10} {
			floor, nexts, heads := h.proof(false)
			require.True(t, ascending(nexts, heads), "step %d: %v %v", i, nexts, heads)
			assert.Equal(t, h.observe(snap(x, x, 0), false), proofHorizon(floor, nexts, heads, x), "step %d, auto-commit xmin %d", i, x)
		}
		for _, x := range []int64{0, 900, h.xmin - 50, h.xmin - 1, h.xmin, next} {
			floor, nexts, heads := h.proof(true)
			require.True(t, ascending(nexts, heads), "step %d: %v %v", i, nexts, heads)
			assert.Zero(t, floor)
			assert.Equal(t, h.observe(snap(x, x, 0), false), proofHorizon(floor, nexts, heads, x), "step %d, transaction xmin %d", i, x)
		}
	}
	_, nexts, _ := h.proof(true)
	assert.LessOrEqual(t, len(nexts), maxPending+maxSettled)
}

// A Tx the store began offers (what the store knew drawn when it began,
// its own id): a snapshot taken while the Tx runs, with the Tx the oldest
// transaction (xmin its id, next above it), settles that head through it,
// where the snapshot's own candidate settles nothing new; one with an older
// transaction still running does not (docs/design/stream-horizon.md,
// mechanism step 5).
func TestHorizonTxCandidateSettlesWhileTheTxRuns(t *testing.T) {
	var h horizon
	h.observe(snap(100, 100, 10), true) // quiet: 10 settled
	h.saw(11)                           // an auto-commit publish returned 11
	h.saw(7)                            // an older figure changes nothing
	require.Equal(t, int64(11), h.drawn.Load())
	drawnBefore := h.drawn.Load() // a Tx begins, then takes id 105

	assert.Equal(t, int64(10), h.observe(snap(105, 106, 11), true), "without the offer the Tx holds 11")
	assert.True(t, h.offer(drawnBefore, 105))
	assert.Equal(t, int64(11), h.observe(snap(105, 106, 11), true), "settled while the Tx runs")
	assert.Equal(t, int64(10), h.observe(snap(104, 106, 11), false), "an older transaction still runs")

	assert.False(t, h.offer(drawnBefore, 105), "kept already")
	assert.False(t, h.offer(5, 200), "a better candidate is kept")
	assert.False(t, h.offer(0, 300), "nothing drawn before the Tx")
	h.observe(snap(300, 300, 40), true)
	assert.Equal(t, int64(40), h.drawn.Load(), "snapshots' heads count as drawn")
}
