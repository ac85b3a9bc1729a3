package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/wake"
)

// TestGateCarrierCoversOnlyWhatWasOwedBeforeItBegan: a carrier's commit
// (wakeGate.covered) cancels the trailing wake only when every debt was
// owed before the carrier began (carry): a write that committed without a
// wake after the carrier began may not be seen by the readers the
// carrier's NOTIFY wakes, so its trailing wake must still go out. The
// gate's NOTIFY is a function here; flush sends what is still owed. The
// interleavings with a database are in tests/wakegate_carry_test.go.
func TestGateCarrierCoversOnlyWhatWasOwedBeforeItBegan(t *testing.T) {
	for _, later := range []bool{false, true} {
		topic := "s:gate-carrier-unit"
		restore := wake.SetGateWindow(topic, time.Hour)
		var sent []string
		g := &wakeGate{send: func(topic string) { sent = append(sent, topic) }}
		require.NotEmpty(t, g.wake(topic), "the first write opens the window")
		g.owe(topic) // a write inside the window committed: a trailing wake an hour away
		w, seq := g.carry(topic)
		require.Empty(t, w, "a carrier inside the first half of the window")
		require.Zero(t, seq)
		wake.SetGateWindow(topic, 0) // the window is over
		w, seq = g.carry(topic)
		require.NotEmpty(t, w, "no carrier once the window is over")
		require.NotZero(t, seq)
		if later {
			g.owe(topic) // committed after the carrier began (the trailing wake is already scheduled)
		}
		g.covered(topic, seq) // the carrier committed
		g.flush()             // sends every trailing wake still owed
		if later {
			require.Equal(t, []string{topic}, sent, "a debt owed after the carrier began lost its trailing wake")
		} else {
			require.Empty(t, sent, "the carrier's commit did not cancel the trailing wake")
		}
		restore()
	}
}

// TestGateBatchCarriesPastHalfTheWindow: an auto-commit batch
// (carryBatch: EnqueueMany, PublishMany) carries a NOTIFY once half the window has
// passed, with no trailing wake owed, where a publish (carry) carries none
// until one is owed; inside the first half it carries none, so the gate
// still bounds a topic's NOTIFYs to about two a window. The interleaving
// with a database is TestBatchPastHalfTheWindowCarriesItsWake.
func TestGateBatchCarriesPastHalfTheWindow(t *testing.T) {
	topic := "q:gate-batch-unit"
	defer wake.SetGateWindow(topic, time.Hour)()
	var sent []string
	g := &wakeGate{send: func(topic string) { sent = append(sent, topic) }}
	require.NotEmpty(t, g.wake(topic), "the first write opens the window")
	w, seq := g.carryBatch(topic)
	require.Empty(t, w, "a batch inside the first half of the window")
	require.Zero(t, seq)
	g.mu.Lock()
	g.topics[topic].last = time.Now().Add(-40 * time.Minute) // past half the hour, not past the hour
	g.mu.Unlock()
	w, seq = g.carry(topic)
	require.Empty(t, w, "a publish past half the window with no trailing wake owed")
	require.Zero(t, seq)
	w, seq = g.carryBatch(topic)
	require.NotEmpty(t, w, "a batch past half the window carried no NOTIFY")
	require.NotZero(t, seq)
	w, _ = g.carryBatch(topic)
	require.Empty(t, w, "the batch's NOTIFY opens a new window")
	g.flush()
	require.Empty(t, sent, "nothing was owed")
}

// TestGateCarrierPostponesWhatWasOwedAfterItBegan: a carrier's commit
// (covered) with a debt owed after the carrier began keeps the trailing
// wake, but moves it to a window after the carrier's NOTIFY went out (the
// debt was owed after that), where it stayed at the end of the window
// the carrier began in: with several writers the trailing wake went out
// at the end of nearly every window. A later carrier with nothing owed
// after it began then cancels it. The gate's NOTIFY is a function; the
// window an hour, and the first wake moved 40 minutes back (past half the
// window, so a carrier carries).
func TestGateCarrierPostponesWhatWasOwedAfterItBegan(t *testing.T) {
	topic := "s:gate-postpone-unit"
	defer wake.SetGateWindow(topic, time.Hour)()
	var sent []string
	g := &wakeGate{send: func(topic string) { sent = append(sent, topic) }}
	require.NotEmpty(t, g.wake(topic), "the first write opens the window")
	g.mu.Lock()
	g.topics[topic].last = time.Now().Add(-40 * time.Minute)
	g.mu.Unlock()
	g.owe(topic) // a write inside the window committed: a trailing wake 20 minutes away
	st := g.topics[topic]
	g.mu.Lock()
	due := st.due
	g.mu.Unlock()
	require.WithinDuration(t, time.Now().Add(20*time.Minute), due, time.Minute)

	w, seq := g.carry(topic) // past half the window, a trailing wake owed
	require.NotEmpty(t, w)
	g.owe(topic)          // committed after the carrier began
	g.covered(topic, seq) // the carrier committed
	g.mu.Lock()
	trailing, postponed := st.trailing, st.due
	g.mu.Unlock()
	require.True(t, trailing, "a debt owed after the carrier began lost its trailing wake")
	require.WithinDuration(t, time.Now().Add(time.Hour), postponed, time.Minute,
		"the trailing wake did not move to a window after the carrier's NOTIFY")

	g.mu.Lock()
	st.last = time.Now().Add(-40 * time.Minute) // the next carrier, past half the window
	g.mu.Unlock()
	w, seq2 := g.carry(topic)
	require.NotEmpty(t, w)
	g.covered(topic, seq2) // nothing was owed after it began
	g.mu.Lock()
	trailing = st.trailing
	g.mu.Unlock()
	require.False(t, trailing, "the later carrier did not cancel the trailing wake")
	g.flush()
	require.Empty(t, sent)
}

// TestGateOnlyTheLatestCarrierPostpones: a carrier that commits after a
// later one began leaves the trailing wake where it is (the later one's
// commit decides): its NOTIFY went out before the later one's, which is
// what last says.
func TestGateOnlyTheLatestCarrierPostpones(t *testing.T) {
	topic := "s:gate-postpone-latest-unit"
	defer wake.SetGateWindow(topic, time.Hour)()
	g := &wakeGate{send: func(string) {}}
	require.NotEmpty(t, g.wake(topic))
	g.mu.Lock()
	g.topics[topic].last = time.Now().Add(-40 * time.Minute)
	g.mu.Unlock()
	g.owe(topic)
	st := g.topics[topic]
	w, seq := g.carry(topic)
	require.NotEmpty(t, w)
	g.mu.Lock()
	st.last = time.Now().Add(-40 * time.Minute) // a later carrier begins
	g.mu.Unlock()
	w, _ = g.carry(topic)
	require.NotEmpty(t, w)
	g.owe(topic)
	g.mu.Lock()
	due := st.due
	g.mu.Unlock()
	g.covered(topic, seq) // the first carrier commits
	g.mu.Lock()
	require.True(t, st.trailing)
	require.Equal(t, due, st.due, "a carrier that was not the latest moved the trailing wake")
	g.mu.Unlock()
	g.flush()
}

// TestGatePostponesFromTheCarriersStart: the trailing wake a carrier's
// commit moves goes to a window after the carrier's own start, not after
// last, which a write that is no carrier (one in a store Tx, whose NOTIFY
// goes out at its commit or never) moves once the window closed, as it
// has when the trailing wake's timer runs late (review59a F1). Time is
// emulated by moving the gate's times back, the window an hour.
func TestGatePostponesFromTheCarriersStart(t *testing.T) {
	topic := "s:gate-postpone-carrier-start-unit"
	defer wake.SetGateWindow(topic, time.Hour)()
	sent := make(chan string, 4)
	g := &wakeGate{send: func(topic string) { sent <- topic }}
	require.NotEmpty(t, g.wake(topic))
	st := g.topics[topic]
	g.mu.Lock()
	st.last = time.Now().Add(-40 * time.Minute)
	g.mu.Unlock()
	g.owe(topic) // a trailing wake 20 minutes away
	w, seq := g.carry(topic)
	require.NotEmpty(t, w)
	g.owe(topic) // W committed after the carrier C began
	g.mu.Lock()
	// 61 minutes pass: C's window closed; the trailing wake (due 41
	// minutes ago) has not fired yet.
	st.last = st.last.Add(-61 * time.Minute)
	st.carrierAt = st.last
	st.due = st.due.Add(-61 * time.Minute)
	g.mu.Unlock()
	require.NotEmpty(t, g.wake(topic), "X, a write in a store Tx past the window, takes a wake")
	g.covered(topic, seq) // C commits
	select {
	case <-sent: // a window after C began: at once
	case <-time.After(10 * time.Second):
		g.mu.Lock()
		defer g.mu.Unlock()
		require.True(t, st.trailing, "W lost its trailing wake")
		require.Fail(t, "W's trailing wake did not go out", "C's commit moved it %v ahead, a window after X began, whose NOTIFY has not gone out",
			time.Until(st.due).Round(time.Minute))
	}
	g.flush()
}
