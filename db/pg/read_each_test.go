package pgdb

import (
	"encoding/binary"
	"os"
	"regexp"
	"testing"
)

// TestReadEventsEachIsReadEvents: the hand-written ReadEventsEach and
// ReadEventsFromConsumerEach send the generated ReadEvents's and
// ReadEventsFromConsumer's arguments in their order and scan their columns
// into the same fields, and the snapshot column they decode from the first
// row only is the column before the first event column (ID), so a change
// of the queries (regenerated) that this file does not follow fails here
// rather than binding or reading the wrong column.
func TestReadEventsEachIsReadEvents(t *testing.T) {
	generated, err := os.ReadFile("streams.sql.go")
	if err != nil {
		t.Fatal(err)
	}
	handWritten, err := os.ReadFile("read_each.go")
	if err != nil {
		t.Fatal(err)
	}
	field := regexp.MustCompile(`[&.\w]+`)
	for _, c := range []struct {
		name, stmt string
		snapshot   int // leading columns decoded from the first row only
	}{
		{"ReadEvents", "readEvents", 1},
		{"ReadEventsFromConsumer", "readEventsFromConsumer", 1},
	} {
		args := regexp.MustCompile(`(?s)q\.db\.Query\(ctx, ` + c.stmt + `,(.*?)\)\n`)
		scans := regexp.MustCompile(`(?s)rows\.Scan\((.*?)\)|dest := \[\]any\{(.*?)\}`)
		gen := regexp.MustCompile(`(?s)func \(q \*Queries\) ` + c.name + `\(.*?\n}\n`).Find(generated)
		hand := regexp.MustCompile(`(?s)func \(q \*Queries\) ` + c.name + `Each\(.*?\n}\n`).Find(handWritten)
		if gen == nil || hand == nil {
			t.Fatalf("%s: not found (generated %v, hand-written %v)", c.name, gen != nil, hand != nil)
		}
		list := func(re *regexp.Regexp, src []byte) []string {
			m := re.FindSubmatch(src)
			if m == nil {
				t.Fatalf("%s: %s: not found", c.name, re)
			}
			var out []string
			for _, g := range m[1:] {
				for _, f := range field.FindAll(g, -1) {
					out = append(out, string(f))
				}
			}
			return out
		}
		for _, re := range []*regexp.Regexp{args, scans} {
			want, got := list(re, gen), list(re, hand)
			if len(want) == 0 || len(want) != len(got) {
				t.Fatalf("%s: generated %q, hand-written %q", c.name, want, got)
			}
			for i := range want {
				if want[i] != got[i] {
					t.Fatalf("%s: generated %q, hand-written %q", c.name, want, got)
				}
			}
		}
		cols := list(scans, gen)
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
