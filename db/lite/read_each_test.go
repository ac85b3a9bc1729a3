package litedb

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestReadEachIsGenerated: the hand-written functions of read_each.go run
// the generated functions' statements with their arguments in their
// order, and read the columns into the fields the generated functions scan
// them into, in the same order, so a change of ReadEvents or
// ReadEventsFromConsumer (regenerated) that this file does not follow
// fails here rather than binding or reading the wrong column.
func TestReadEachIsGenerated(t *testing.T) {
	genQuery := regexp.MustCompile(`(?s)q\.query\(ctx, q\.\w+Stmt, (\w+),(.*?)\)\n`)
	handQuery := regexp.MustCompile(`(?s)litedriver\.Query\(ctx, db, (\w+), func.*?\}, (.*?)\)\n`)
	src, err := os.ReadFile("read_each.go")
	if err != nil {
		t.Fatal(err)
	}
	var reads []string // readEvent's fields, checked to read columns 0, 1, ... in order
	for i, m := range regexp.MustCompile(`i\.(\w+) = r\.\w+\((\d+)\)`).FindAllSubmatch(src, -1) {
		if string(m[2]) != strconv.Itoa(i) {
			t.Fatalf("readEvent reads column %s as its %d-th", m[2], i)
		}
		reads = append(reads, "&i."+string(m[1]))
	}
	for _, name := range []string{"ReadEvents", "ReadEventsFromConsumer"} {
		gen, hand := gencheck.Func(t, "streams.sql.go", name), gencheck.Func(t, "read_each.go", name+"Each")
		gencheck.Same(t, name+": arguments", gencheck.Fields(t, genQuery, gen), gencheck.Fields(t, handQuery, hand))
		gencheck.Same(t, name+": columns", gencheck.Fields(t, gencheck.Scans, gen), reads)
	}
}
