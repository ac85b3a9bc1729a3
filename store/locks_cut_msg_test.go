package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLocksCutMsgNamesWhatWasCut: a hard stop's message names the waits
// it gave up as they were: it said "writes" for a read's wait too. (A
// read of the store's waits for a lock only when another connection holds
// the file exclusively, which, in WAL mode, it cannot take while the
// store's connections are open: the driver's TestEndLockWaitsCountsReadsApart
// shows the count, outside WAL mode.)
func TestLocksCutMsgNamesWhatWasCut(t *testing.T) {
	w := locksCutMsg(true, false)
	require.Contains(t, w, "hard stop; writes waiting for a lock another connection holds")
	require.Contains(t, w, "stored nothing")
	r := locksCutMsg(false, true)
	require.Contains(t, r, "hard stop; reads waiting for a lock another connection holds")
	require.NotContains(t, r, "writes")
	require.NotContains(t, r, "ack")
	both := locksCutMsg(true, true)
	require.Contains(t, both, "hard stop; writes and reads waiting for a lock another connection holds")
	require.Contains(t, both, "the writes stored nothing")
}
