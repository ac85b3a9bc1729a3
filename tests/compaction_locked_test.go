package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// Left open by the fifty-second session (compact53).

// TestCompactionCursorStaysBelowALockedVersion: a compaction window that
// skips a superseded version because another transaction holds it (a
// janitor's window that deleted it and is then rolled back: its budget or
// context ended, its process died) must not move the cursor past it, or
// the version, back after the rollback, is never walked again. The holder
// here is a transaction deleting the version, held open while a janitor
// compacts (which must not wait for it), then rolled back; a later pass
// deletes the version. Twenty rounds, each a new key. PostgreSQL only: on
// SQLite a transaction holds the one writer, so no compaction runs beside
// it. Fails with a window that advances whatever it skipped (round 0: the
// key's replay kept "v1" before "v2" for good).
func TestCompactionCursorStaysBelowALockedVersion(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	s, st, clk := compactedOnClock(t, e, "kv")
	db := e.sqlDB(t)
	const rounds = 20
	for i := range rounds {
		key := fmt.Sprintf("k%d", i)
		v1 := supersedeAndSettle(t, c, s, st, clk, key, fmt.Sprint(i))

		held, err := db.BeginTx(c, nil)
		require.NoError(t, err)
		_, err = held.ExecContext(c, `DELETE FROM alkstore.events WHERE id = $1`, v1)
		require.NoError(t, err)
		bc, cancel := context.WithTimeout(c, 30*time.Second)
		_, err = s.Maintenance().CompactSuperseded(bc, 100) // skips v1, waits for nothing
		cancel()
		require.NoError(t, err, "round %d: compaction waited for the held row", i)
		var cur int64
		require.NoError(t, db.QueryRowContext(c, `SELECT compacted_through FROM alkstore.streams WHERE name = 'kv'`).Scan(&cur))
		t.Logf("round %d: v1 %d, cursor %d, replay %v", i, v1, cur, replayKeyed(t, c, st))
		require.NoError(t, held.Rollback()) // v1 is back

		var got []string
		ok := assert.Eventually(t, func() bool { // a later pass takes v1
			_, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
			require.NoError(t, err)
			got = got[:0]
			for _, kv := range replayKeyed(t, c, st) {
				if strings.HasPrefix(kv, key+"=") {
					got = append(got, kv)
				}
			}
			return slices.Equal(got, []string{key + "=v2"})
		}, 30*time.Second, 10*time.Millisecond)
		require.True(t, ok, "round %d: the superseded v1 outlived the skipped window: %v", i, got)
	}
}

// compactedOnClock opens a store on e whose clock the test moves, with
// the stream name compacted (MinCompactionLag and TombstoneRetention an
// hour): the set-up of the tests of a compaction window that meets a
// version another transaction holds.
func compactedOnClock(t *testing.T, e *engineEnv, name string, opts ...store.Option) (*store.Store, *store.Stream, *offsetClock) {
	t.Helper()
	clk := &offsetClock{}
	s := e.open(t, append([]store.Option{store.WithClock(clk.Now)}, opts...)...)
	st := s.Stream(name)
	require.NoError(t, st.Configure(ctx(t), store.StreamConfig{Compacted: true, MinCompactionLag: time.Hour, TombstoneRetention: time.Hour}))
	return s, st, clk
}

// supersedeAndSettle publishes v1 then v2 of key on st (compactedOnClock's)
// and a later event of the key "other" (with the value other), waits until
// they are settled (a read is cut at the horizon), and runs a pass while
// they are inside the lag: it walks nothing, but learns that they are
// settled, so that a transaction begun after holds the settled horizon
// above them, as a janitor's window does (its transaction began after the
// events it walks). It then moves clk past the lag, and returns v1's id.
func supersedeAndSettle(t *testing.T, c context.Context, s *store.Store, st *store.Stream, clk *offsetClock, key, other string) int64 {
	t.Helper()
	v1, err := st.PublishWithKey(c, key, []byte("v1"))
	require.NoError(t, err)
	_, err = st.PublishWithKey(c, key, []byte("v2"))
	require.NoError(t, err)
	_, err = st.PublishWithKey(c, "other", []byte(other))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.Contains(replayKeyed(t, c, st), "other="+other)
	}, 30*time.Second, 10*time.Millisecond)
	_, err = s.Maintenance().CompactSuperseded(c, 100)
	require.NoError(t, err)
	clk.Advance(2 * time.Hour)
	return v1
}
