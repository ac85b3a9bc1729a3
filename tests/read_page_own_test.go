package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestReadPagesAreTheCallersOwn: a page a read returns is the caller's
// alone. On PostgreSQL a read collects its events in a scratch slice the
// store reuses for later reads and returns a copy; a page that shared the
// scratch would change under its caller when a later read (of any stream,
// on any goroutine) filled it again. Every read form, each page checked
// after all the later reads, and appending to a page must not reach
// another.
func TestReadPagesAreTheCallersOwn(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		a, b := s.Stream("own-a"), s.Stream("own-b")
		for i := range 6 {
			_, err := a.Publish(c, fmt.Appendf(nil, "a%d", i))
			require.NoError(t, err)
			_, err = b.Publish(c, fmt.Appendf(nil, "b%d", i))
			require.NoError(t, err)
		}
		payloads := func(evs []store.Event) []string {
			var out []string
			for _, ev := range evs {
				out = append(out, ev.Stream+":"+string(ev.Payload))
			}
			return out
		}
		var pages [][]store.Event
		var want [][]string
		keep := func(evs []store.Event, err error) []store.Event {
			t.Helper()
			require.NoError(t, err)
			pages, want = append(pages, evs), append(want, payloads(evs))
			return evs
		}
		first := keep(a.ReadSince(c, 0, 3))
		keep(a.ReadSince(c, first[len(first)-1].Offset, 3))
		keep(b.ReadSince(c, 0, 6))
		keep(a.ReadFromConsumer(c, "reader", 4))
		tx, err := s.Begin(c)
		require.NoError(t, err)
		keep(b.ReadSinceTx(c, tx, 0, 2))
		keep(a.ReadFromConsumerTx(c, tx, "reader", 5))
		require.NoError(t, tx.Rollback(c))
		keep(b.ReadSince(c, 0, 6))

		require.Equal(t, []string{"own-a:a0", "own-a:a1", "own-a:a2"}, want[0])
		for i, p := range pages {
			require.Equal(t, want[i], payloads(p), "page %d changed after later reads", i)
		}
		// Appending to a page (within its capacity, if it has room) writes
		// into no other page.
		_ = append(pages[0][:1], store.Event{Stream: "x", Payload: []byte("x")}, store.Event{Stream: "x", Payload: []byte("x")})
		for i, p := range pages[1:] {
			require.Equal(t, want[i+1], payloads(p), "page %d changed by an append to page 0", i+1)
		}
	})
}

// TestReadEventsStayAsPublished: every event of a page is what was
// published (stream, offset, key, payload with nil apart from empty,
// headers, the time it was stored) and stays so after later reads, and
// the read forms agree on each event down to its time, for events with
// and without keys, tombstones, empty and long payloads and headers. On
// SQLite a read outside a transaction builds each event from SQLite's
// memory, which the next row overwrites: a key, a payload or headers taken
// from there without a copy would turn into a later row's. Writing into
// the spare capacity of one event's payload reaches no other event.
func TestReadEventsStayAsPublished(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("as-published")
		type sent struct {
			key     *string
			payload []byte
			headers map[string]string
		}
		want := map[int64]sent{}
		var msgs []store.Message
		for i := range 40 {
			m := store.Message{Payload: fmt.Appendf(nil, "payload %d %s", i, strings.Repeat("x", i*37))}
			switch i % 5 {
			case 1:
				k := fmt.Sprintf("key-%d-%s", i, strings.Repeat("k", i))
				m.Key = &k
			case 2:
				m.Payload = []byte{}
			case 3:
				k := fmt.Sprintf("tomb-%d", i)
				m.Key, m.Payload = &k, nil
			}
			if i%3 == 0 {
				m.Headers = map[string]string{"n": fmt.Sprint(i), "trace": strings.Repeat("t", i)}
			}
			msgs = append(msgs, m)
		}
		offs, err := st.PublishMany(c, msgs[:20])
		require.NoError(t, err)
		for _, m := range msgs[20:] {
			off, err := st.PublishMessage(c, m)
			require.NoError(t, err)
			offs = append(offs, off)
		}
		for i, off := range offs {
			want[off] = sent{msgs[i].Key, msgs[i].Payload, msgs[i].Headers}
		}

		var pages [][]store.Event
		read := func(evs []store.Event, err error) []store.Event {
			t.Helper()
			require.NoError(t, err)
			pages = append(pages, evs)
			return evs
		}
		var all []store.Event // from ReadSince, in pages of 7
		for after := int64(0); ; {
			evs := read(st.ReadSince(c, after, 7))
			if len(evs) == 0 {
				break
			}
			all, after = append(all, evs...), evs[len(evs)-1].Offset
		}
		require.Len(t, all, len(offs))
		read(st.ReadFromConsumer(c, "reader", 100))
		tx, err := s.Begin(c)
		require.NoError(t, err)
		inTx := read(st.ReadSinceTx(c, tx, 0, 100))
		read(st.ReadFromConsumerTx(c, tx, "reader", 100))
		require.NoError(t, tx.Rollback(c))
		r, err := st.Subscribe(c, "sub", store.SubscribeOpts{PageSize: 9})
		require.NoError(t, err)
		defer r.Close()
		var got []store.Event
		for range offs {
			ev, err := r.Recv(c)
			require.NoError(t, err)
			got = append(got, ev)
		}
		pages = append(pages, got)

		check := func(when string) {
			t.Helper()
			for p, page := range pages {
				for _, ev := range page {
					w, ok := want[ev.Offset]
					require.True(t, ok, "%s: page %d: offset %d was not published", when, p, ev.Offset)
					require.Equal(t, "as-published", ev.Stream, "%s: page %d, offset %d", when, p, ev.Offset)
					require.Equal(t, w.key, ev.Key, "%s: page %d, offset %d: key", when, p, ev.Offset)
					require.Equal(t, w.payload == nil, ev.Payload == nil, "%s: page %d, offset %d: nil payload", when, p, ev.Offset)
					require.Equal(t, string(w.payload), string(ev.Payload), "%s: page %d, offset %d: payload", when, p, ev.Offset)
					require.Equal(t, w.headers, ev.Headers, "%s: page %d, offset %d: headers", when, p, ev.Offset)
					require.False(t, ev.CreatedAt.IsZero(), "%s: page %d, offset %d: time", when, p, ev.Offset)
				}
			}
		}
		check("after every read")
		// The forms agree, event by event, time and all.
		for p, page := range pages[len(pages)-4:] {
			require.Equal(t, all, page, "page %d of the other forms", p)
		}
		require.Equal(t, all, inTx)

		// A payload's spare capacity is its own.
		for _, page := range pages {
			for _, ev := range page {
				if p := ev.Payload; p != nil {
					for i := range p[len(p):cap(p)] {
						p[:cap(p)][len(p)+i] = '!'
					}
				}
			}
		}
		check("after writing into every payload's spare capacity")
	})
}
