package pgdb

import (
	"encoding/binary"
	"regexp"
	"testing"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestReadEventsEachIsReadEvents: the hand-written ReadEventsEach and
// ReadEventsFromConsumerEach send the generated ReadEvents's and
// ReadEventsFromConsumer's arguments in their order and scan their columns
// into the same fields, and the snapshot column they decode from the first
// row only is the column before the first event column (ID), so a change
// of the queries (regenerated) that this file does not follow fails here
// rather than binding or reading the wrong column.
func TestReadEventsEachIsReadEvents(t *testing.T) {
	for _, c := range []struct {
		name, stmt string
		hand, via  string // the function that runs it, and the name it runs it by
		snapshot   int    // leading columns decoded from the first row only
	}{
		// ReadEventsEach and ReadEventsOutsideTxEach (its twin's arguments
		// and columns: read_twins_test.go) run it in readEventsEach.
		{"ReadEvents", "readEvents", "readEventsEach", "stmt", 1},
		{"ReadEventsFromConsumer", "readEventsFromConsumer", "ReadEventsFromConsumerEach", "readEventsFromConsumer", 1},
	} {
		query := func(stmt string) *regexp.Regexp {
			return regexp.MustCompile(`(?s)q\.db\.Query\(ctx, ` + stmt + `,(.*?)\)\n`)
		}
		gen, hand := gencheck.Func(t, "streams.sql.go", c.name), gencheck.Func(t, "read_each.go", c.hand)
		gencheck.Same(t, c.name+": arguments", gencheck.Fields(t, query(c.stmt), gen), gencheck.Fields(t, query(c.via), hand))
		gencheck.Same(t, c.name+": columns", gencheck.Fields(t, gencheck.Scans, gen), gencheck.Fields(t, gencheck.Scans, hand))
		cols := gencheck.Fields(t, gencheck.Scans, gen)
		if len(cols) <= c.snapshot || cols[c.snapshot] != "&i.ID" || cols[0] != "&i.Snapshot" {
			t.Fatalf("%s: the columns before ID are not the %d snapshot column(s): %q", c.name, c.snapshot, cols)
		}
		clearing := regexp.MustCompile(`clear\(dest\[:(\d+)\]\)`).FindSubmatch(hand)
		if clearing == nil || string(clearing[1]) != string(rune('0'+c.snapshot)) {
			t.Fatalf("%s: the loop must clear exactly the %d snapshot destination(s) after the first row", c.name, c.snapshot)
		}
	}
}

// TestParsePageSnapshot: the snapshot column's figures, in order, and
// nothing that is not exactly them.
func TestParsePageSnapshot(t *testing.T) {
	col := func(xmin, xmax, age, head int64, xid bool, horizon int64, after ...int64) []byte {
		var b []byte
		for _, v := range []int64{xmin, xmax, age, head} {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
		if xid {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.BigEndian.AppendUint64(b, uint64(horizon))
		for _, v := range after {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
		return b
	}
	p, err := ParsePageSnapshot(col(10, 20, -3, 400, true, 350), false)
	if err != nil {
		t.Fatal(err)
	}
	want := PageSnapshot{SettledSnapshotRow: SettledSnapshotRow{Xmin: 10, Xmax: 20, XmaxAge: -3, VisibleHead: 400, HasXid: true}, Horizon: 350}
	if p != want {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	p, err = ParsePageSnapshot(col(10, 20, 0, 400, false, 350, 7), true)
	if err != nil {
		t.Fatal(err)
	}
	want.HasXid, want.XmaxAge, want.After = false, 0, 7
	if p != want {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	badXid := col(10, 20, 0, 400, false, 350)
	badXid[32] = 2
	for _, bad := range []struct {
		b         []byte
		withAfter bool
	}{
		{nil, false}, {col(10, 20, 0, 400, false, 350)[:40], false}, {col(10, 20, 0, 400, false, 350, 7), false},
		{col(10, 20, 0, 400, false, 350), true}, {badXid, false},
	} {
		if _, err := ParsePageSnapshot(bad.b, bad.withAfter); err == nil {
			t.Errorf("%x (after %v): no error", bad.b, bad.withAfter)
		}
	}
}
