package litedb

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestClaimWriterIsGenerated: the hand-written functions of claim_writer.go
// run the generated functions' statements with their arguments in their
// order, and read the columns of ClaimableJobs and ClaimableReadyJobs into
// the fields the generated functions scan them into, in the same order,
// so a change of a query (regenerated) that this file does not follow
// fails here rather than binding or reading the wrong column.
func TestClaimWriterIsGenerated(t *testing.T) {
	genExec := regexp.MustCompile(`(?s)q\.exec\(ctx, q\.\w+Stmt, (\w+),(.*?)\)\n`)
	handExec := regexp.MustCompile(`(?s)w\.Exec\((\w+),(.*?)\)\n`)
	for _, name := range []string{"BuryExhaustedClaims", "ClaimJobs", "ClaimJob", "AckJob", "CompleteJob", "AckJobsCounted", "CompleteJobsCounted"} {
		g := gencheck.Fields(t, genExec, gencheck.Func(t, "queues.sql.go", name))
		h := gencheck.Fields(t, handExec, gencheck.Func(t, "claim_writer.go", name+"On"))
		gencheck.Same(t, name, g, h)
	}
	genQuery := regexp.MustCompile(`(?s)q\.query\(ctx, q\.\w+Stmt, (\w+),(.*?)\)\n`)
	handQuery := regexp.MustCompile(`(?s)w\.Query\((\w+), func.*?\}, (.*?)\)\n`)
	src, err := os.ReadFile("claim_writer.go")
	if err != nil {
		t.Fatal(err)
	}
	var reads []string // readClaimable's fields, checked to read columns 0, 1, ... in order
	for i, m := range regexp.MustCompile(`i\.(\w+) = r\.\w+\((\d+)\)`).FindAllSubmatch(src, -1) {
		if string(m[2]) != strconv.Itoa(i) {
			t.Fatalf("readClaimable reads column %s as its %d-th", m[2], i)
		}
		reads = append(reads, "&i."+string(m[1]))
	}
	for _, name := range []string{"ClaimableJobs", "ClaimableReadyJobs"} {
		gen, hand := gencheck.Func(t, "queues.sql.go", name), gencheck.Func(t, "claim_writer.go", name+"On")
		gencheck.Same(t, name+": arguments", gencheck.Fields(t, genQuery, gen), gencheck.Fields(t, handQuery, hand))
		gencheck.Same(t, name+": columns", gencheck.Fields(t, gencheck.Scans, gen), reads)
	}
}
