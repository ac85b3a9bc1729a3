package tests

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestGroupPagesAreBoundedInBytes: a group member's read of the stream
// holds at most GroupOpts.PageBytes (default DefaultGroupPageBytes, 16
// MiB) of events, whatever PageSize lets it take: 5 events of 3.25 MiB
// (16.25 MiB, just over the bound, and far fewer than the 256 events of a
// page) come in pages of 4 (13 MiB; a fifth would take the page to 16.25
// MiB) and 1, in order, none skipped: those after a cut come in the next
// page. The pages are told apart by the member's reads (a statement hook
// counts them): the events each Recv returned after the same number of
// reads came from one page. Before, one read took all 5 (16.25 MiB), both
// engines. (The test published 7 events of 3 MiB, 21 MiB an engine, until
// session 53: a stream just over the bound proves the same cut, with a
// quarter fewer bytes to write and read under -race.)
func TestGroupPagesAreBoundedInBytes(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		reads := &stmtCounts{}
		s := e.openHooked(t, reads.hook)
		st := s.Stream("big")
		const n, size = 5, 13 << 18 // 3.25 MiB: 4 fit in a page, 5 do not
		msgs := make([]store.Message, n)
		key := "k"
		for i := range msgs {
			msgs[i] = store.Message{Key: &key, Payload: bytes.Repeat([]byte{byte('a' + i)}, size)}
		}
		offs, err := st.PublishMany(c, msgs)
		require.NoError(t, err)
		m, err := st.Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour, SafetyPoll: time.Hour})
		require.NoError(t, err)
		defer m.Close()
		pages := map[int]int{} // read number → bytes of the events handed out after it
		var order []int
		for i := range n {
			ev, err := m.Recv(c)
			require.NoError(t, err)
			require.Equal(t, offs[i], ev.Offset, "event %d: in order, none skipped", i)
			require.Equal(t, msgs[i].Payload, ev.Payload)
			r := reads.count("ReadEvents", "ReadEventsOutsideTx")
			if _, ok := pages[r]; !ok {
				order = append(order, r)
			}
			pages[r] += len(ev.Payload) + len(*ev.Key)
		}
		var sizes []int
		for _, r := range order {
			sizes = append(sizes, pages[r])
		}
		t.Logf("%s: bytes of each page: %v", e.name, sizes)
		for _, b := range sizes {
			assert.LessOrEqual(t, b, store.DefaultGroupPageBytes, "%s: a page of %d bytes (pages %v)", e.name, b, sizes)
		}
		assert.Greater(t, n*(size+1), store.DefaultGroupPageBytes, "the stream holds more than one page's bytes")
		assert.Equal(t, []int{4 * (size + 1), 1 * (size + 1)}, sizes, "%s: pages of 4 and 1 events", e.name)
	})
}
