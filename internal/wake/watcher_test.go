package wake

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWatcherWakesOnChangeAndClosesTheHubWhenItDies(t *testing.T) {
	hub := &Hub{}
	sub := hub.Subscribe("s:events")
	defer sub.Close()
	var version atomic.Int64
	broken := errors.New("disk gone")
	var fail atomic.Bool
	firstRead := make(chan struct{})
	var calls atomic.Int64
	w := StartWatcher(hub, func(context.Context) (int64, error) {
		if calls.Add(1) == 1 {
			defer close(firstRead)
		}
		if fail.Load() {
			return 0, broken
		}
		return version.Load(), nil
	}, Polling{Fastest: time.Millisecond, Slowest: 4 * time.Millisecond, QuietAfter: 100 * time.Millisecond})
	defer w.Close()

	select {
	case <-firstRead:
	default:
		t.Fatal("the baseline must be read before StartWatcher returns")
	}
	version.Add(1) // another process committed
	select {
	case <-sub.C():
	case <-time.After(10 * time.Second):
		t.Fatal("no wake after the data version changed")
	}

	fail.Store(true)
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the hub stayed open after the watcher died")
	}
	assert.ErrorIs(t, sub.Err(), broken, "the cause is kept")
	late := hub.Subscribe("s:other")
	<-late.Done() // a dead feed accepts no new subscribers
}

func TestNotificationEnvelope(t *testing.T) {
	hub := &Hub{}
	text := hub.SubscribeMessages("ch", 4)
	for _, payload := range [][]byte{[]byte("héllo"), {0, 1, 255}, {}} {
		dispatch(hub, EncodeNotification("ch", payload))
		assert.Equal(t, payload, <-text.c)
	}
	dispatch(hub, "n999:short") // malformed: ignored, no panic
}

// A nudge makes the watcher poll at once: with both intervals an hour, the
// change is seen through the nudge alone.
func TestWatcherPollsWhenNudged(t *testing.T) {
	hub := &Hub{}
	sub := hub.Subscribe("s:events")
	defer sub.Close()
	var version atomic.Int64
	nudge := make(chan struct{}, 1)
	w := StartWatcher(hub, func(context.Context) (int64, error) { return version.Load(), nil },
		Polling{Fastest: time.Hour, Slowest: time.Hour, Nudge: nudge})
	defer w.Close()
	version.Add(1) // another process committed, and wrote its WAL
	nudge <- struct{}{}
	select {
	case <-sub.C():
	case <-time.After(10 * time.Second):
		t.Fatal("no wake after a nudge")
	}
}
