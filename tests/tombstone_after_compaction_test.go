package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// A tombstone whose TombstoneRetention ends before the key's older values
// are past MinCompactionLag stays until compaction has walked past it, and
// then the key goes whole: its older value, the tombstone and the head row.
// Deleted at its retention instead, the tombstone took the head row with
// it while the older value was still inside the lag; compaction finds a
// key's older versions through its head row, so it never deleted that value
// and a replay saw the deleted key alive, for good.
func TestTombstoneGoesOnlyAfterCompactionWalkedPastIt(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		st := s.Stream("users")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: 48 * time.Hour, TombstoneRetention: 24 * time.Hour}))
		_, err := st.PublishWithKey(c, "alice", []byte("v1"))
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "alice", nil)
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "bob", []byte("b1"))
		require.NoError(t, err)
		replay := func() []string {
			evs, err := st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			var out []string
			for _, ev := range evs {
				out = append(out, *ev.Key+"="+string(ev.Payload))
			}
			return out
		}
		require.Eventually(t, func() bool { return len(replay()) == 3 }, 30*time.Second, 10*time.Millisecond) // past the settled horizon

		clk.Advance(25 * time.Hour) // the tombstone past its retention, v1 not past the lag
		for range 3 {
			r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
			require.NoError(t, err)
			require.Zero(t, r.TombstonesDeleted, "the tombstone went before compaction walked past it")
			require.Zero(t, r.Compacted)
		}
		assert.Equal(t, []string{"alice=v1", "alice=", "bob=b1"}, replay())

		clk.Advance(24 * time.Hour) // v1 and the tombstone past the lag
		var compacted, tombs int64
		require.Eventually(t, func() bool {
			r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
			require.NoError(t, err)
			compacted, tombs = compacted+r.Compacted, tombs+r.TombstonesDeleted
			return tombs == 1
		}, 30*time.Second, 10*time.Millisecond)
		assert.Equal(t, int64(1), compacted, "v1, superseded by the tombstone")
		assert.Equal(t, []string{"bob=b1"}, replay(), "alice was deleted: a replay must not see her old value")
		_, err = st.Key("alice").CompactionHead(c)
		assert.ErrorIs(t, err, store.ErrNotFound)
	})
}
