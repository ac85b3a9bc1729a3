package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// Left open by the fifty-second session (compact53).

// TestHeadlessKeysLosingVersionIsCompacted: on a stream that is not
// compacted, alice is published at rank 5, then at rank 1 (it loses: the
// head stays at rank 5); TrimTo past the first event makes her row
// headless, and she reads as having no value until her next publish. The
// losing event stays in the log (TrimTo deletes offsets up to its horizon,
// no more, and a log that is not compacted keeps superseded versions, as
// it keeps them beside a head), but once the stream is compacted it is a
// version of a key without a head: superseded, compacted past the lag,
// like every version that is not its key's head. Second form: the headless
// row has gone too (its HeadlessTTL) before the stream is compacted. Fails
// on both engines, both forms, with compaction that deletes only versions
// other than a head it finds (the losing value stayed for good, a replay
// showing alice={"n":1} while she reads as having no value).
func TestHeadlessKeysLosingVersionIsCompacted(t *testing.T) {
	eachEngineEachForm(t, []string{"headless row", "no row"}, func(t *testing.T, e *engineEnv, form int) {
		c := ctx(t)
		clk := &offsetClock{}
		s := e.open(t, store.WithClock(clk.Now))
		st := s.Stream("plain")
		require.NoError(t, st.Configure(c, store.StreamConfig{HeadlessTTL: time.Minute}))
		tp := s.Topic[counter]("plain")
		a, err := tp.Publish(c, &counter{N: 5}, store.PublishOpts{Key: "alice", Rank: 5})
		require.NoError(t, err)
		_, err = tp.Publish(c, &counter{N: 1}, store.PublishOpts{Key: "alice", Rank: 1})
		require.NoError(t, err)
		_, err = tp.Publish(c, &counter{N: 7}, store.PublishOpts{Key: "bob"})
		require.NoError(t, err)
		// On PostgreSQL compaction walks only below the settled horizon
		// (a read is cut there): wait for it to pass every event.
		require.Eventually(t, func() bool { return len(replayKeyed(t, c, st)) == 3 }, 30*time.Second, 10*time.Millisecond)
		h, err := tp.Key("alice").CompactionHead(c)
		require.NoError(t, err)
		require.Equal(t, 5, h.N, "a lower rank never replaces a higher one")

		n, err := st.TrimTo(c, a)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		_, err = tp.Key("alice").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound, "a trimmed key reads as having no value")
		assert.Equal(t, []string{`alice={"n":1}`, `bob={"n":7}`}, replayKeyed(t, c, st), "the log keeps what TrimTo did not reach")
		if form == 1 {
			clk.Advance(time.Hour)
			r, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
			require.NoError(t, err)
			require.EqualValues(t, 1, r.HeadlessDeleted)
		}

		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Minute}))
		clk.Advance(2 * time.Hour)
		for range 2 {
			_, err := countingJanitor(s, janitor.Opts{}).RunOnce(c)
			require.NoError(t, err)
		}
		_, err = tp.Key("alice").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound)
		assert.Equal(t, []string{`bob={"n":7}`}, replayKeyed(t, c, st), "alice has no value: a replay must not show her losing one")

		// Her next publish is her head, whatever its rank, and stays.
		_, err = tp.Publish(c, &counter{N: 0}, store.PublishOpts{Key: "alice"})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(replayKeyed(t, c, st)) == 2 }, 30*time.Second, 10*time.Millisecond)
		clk.Advance(2 * time.Hour)
		_, err = countingJanitor(s, janitor.Opts{}).RunOnce(c)
		require.NoError(t, err)
		h, err = tp.Key("alice").CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, 0, h.N)
		assert.Equal(t, []string{`bob={"n":7}`, `alice={"n":0}`}, replayKeyed(t, c, st))
	})
}
