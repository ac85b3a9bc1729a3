package wake

import (
	"bytes"
	"strings"
	"testing"
)

// The seeds run under plain `go test` (so `make test` covers them); `go test
// -fuzz FuzzX ./internal/wake` explores further.

// A notification encoded for NOTIFY reaches its channel's subscribers with
// exactly its payload, and nobody else; its length is what the store checks
// against MaxPayload, so nothing is ever truncated.
func FuzzNotificationRoundTrip(f *testing.F) {
	f.Add("orders", []byte(`{"id":1}`))
	f.Add("", []byte{})
	f.Add("12:ab", []byte("t"))
	f.Add("ch", []byte{0, 'b', 0xff})
	f.Add("ünïcode", []byte("b=="))
	f.Add("c", bytes.Repeat([]byte("x"), 200))
	f.Add("\x00", []byte("0"))
	f.Fuzz(func(t *testing.T, channel string, payload []byte) {
		enc := EncodeNotification(channel, payload)
		if len(enc) > MaxPayload && len(channel)+len(payload) < MaxPayload/2 {
			t.Fatalf("encoded %d+%d bytes as %d: more than NOTIFY's %d", len(channel), len(payload), len(enc), MaxPayload)
		}
		if strings.ContainsRune(enc, 0) && !strings.ContainsRune(channel, 0) {
			// Channel names are validated (no control characters).
			t.Fatalf("encoded %q contains NUL, which NOTIFY refuses", enc)
		}
		hub := &Hub{}
		defer hub.Close(nil)
		mine := hub.SubscribeMessages(channel, 2)
		other := hub.SubscribeMessages(channel+"x", 2)
		wake := hub.Subscribe(channel)
		dispatch(hub, enc)
		select {
		case got := <-mine.c:
			if !bytes.Equal(got, payload) {
				t.Fatalf("channel %q: got %q, sent %q", channel, got, payload)
			}
		default:
			t.Fatalf("channel %q: %q delivered nothing", channel, enc)
		}
		select {
		case got := <-mine.c:
			t.Fatalf("channel %q: a second delivery %q", channel, got)
		case got := <-other.c:
			t.Fatalf("channel %q: delivered to %q too: %q", channel, channel+"x", got)
		case <-wake.C():
			t.Fatalf("channel %q: a notification woke the topic of the same name", channel)
		default:
		}
	})
}

// A wake reaches its topic's subscribers only, and delivers no message.
func FuzzWakeRoundTrip(f *testing.F) {
	f.Add("s:events")
	f.Add("")
	f.Add("n3:abct")
	f.Add("q:jobs\x00")
	f.Fuzz(func(t *testing.T, topic string) {
		hub := &Hub{}
		defer hub.Close(nil)
		mine, other := hub.Subscribe(topic), hub.Subscribe(topic+"x")
		msgs := hub.SubscribeMessages(topic, 1)
		dispatch(hub, EncodeWake(topic))
		select {
		case <-mine.C():
		default:
			t.Fatalf("topic %q: no wake", topic)
		}
		select {
		case <-other.C():
			t.Fatalf("topic %q: woke %q too", topic, topic+"x")
		case got := <-msgs.c:
			t.Fatalf("topic %q: a wake delivered message %q", topic, got)
		default:
		}
	})
}

// Whatever arrives on the LISTEN channel (anyone with access to the database
// can NOTIFY it), dispatch never panics: the forwarder runs it on its own
// goroutine, where a panic ends the process.
func FuzzDispatch(f *testing.F) {
	for _, s := range []string{"", "w", "wtopic", "n", "n:", "n0:", "n0:t", "n3:abct", "n3:abcb", "n3:abcb!!",
		"n1:ab" + "AAAA", "n-1:x", "n99:x", "nx:y", "n+1:ab", "n9999999999999999999:x", "z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		hub := &Hub{}
		defer hub.Close(nil)
		sub := hub.SubscribeMessages("a", 1)
		defer sub.Close()
		dispatch(hub, payload)
	})
}
