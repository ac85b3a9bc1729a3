package store

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
	assert.Empty(t, h.pending)
}

func TestHorizonInTransactionSnapshotsOnlyConsult(t *testing.T) {
	var h horizon
	h.observe(snap(200, 200, 50), true) // settled (50, next 200)
	// An old REPEATABLE READ snapshot (xmin 150) cannot use what a newer
	// snapshot proved: it may not see every event up to 50.
	assert.EqualValues(t, 0, h.observe(snap(150, 160, 30), false))
	// It records nothing, and its own "quiet" look proves nothing either.
	assert.Empty(t, h.pending)
	assert.EqualValues(t, 50, h.settled.head)
	assert.EqualValues(t, 0, h.observe(snap(150, 150, 30), false))
	// A transaction snapshot newer than the proof uses it.
	assert.EqualValues(t, 50, h.observe(snap(210, 220, 60), false))
}

func TestHorizonIgnoresEpochBoundaryAge(t *testing.T) {
	var h horizon
	row := pgdb.SettledSnapshotRow{Xmin: 1 << 32, Xmax: 1 << 32, XmaxAge: 2147483647, VisibleHead: 10}
	assert.EqualValues(t, 0, h.observe(row, true))
	assert.Empty(t, h.pending)
}

func TestHorizonBoundsPendingCandidates(t *testing.T) {
	var h horizon
	for i := int64(1); i <= 2*maxPending; i++ {
		h.observe(snap(1, 1+i, i), true) // transaction 1 never ends
	}
	assert.Len(t, h.pending, maxPending)
	assert.EqualValues(t, maxPending, h.observe(snap(1+maxPending, 1000, 500), true))
}
