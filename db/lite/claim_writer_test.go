package litedb

import (
	"os"
	"regexp"
	"strconv"
	"strings"
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
	for _, name := range []string{"BuryExhaustedClaims", "ClaimJob", "AckJob", "CompleteJob", "AckJobsCounted", "CompleteJobsCounted"} {
		g := gencheck.Fields(t, genExec, gencheck.Func(t, "queues.sql.go", name))
		h := gencheck.Fields(t, handExec, gencheck.Func(t, "claim_writer.go", name+"On"))
		gencheck.Same(t, name, g, h)
	}
	// ClaimJobs's list of ids (sqlc.slice) comes last: the generated
	// function appends each argument, then the ids; ExecList binds its
	// arguments, then the list.
	genList := regexp.MustCompile(`(?s)query := claimJobs
(.*?)
	result, err := q\.exec\(ctx, nil, query, queryParams\.\.\.\)`)
	handList := regexp.MustCompile(`(?s)w\.ExecList\(claimJobsListed\[.*?\], slots, run,(.*?)\)
`)
	body := genList.FindSubmatch(gencheck.Func(t, "queues.sql.go", "ClaimJobs"))
	if body == nil {
		t.Fatal("ClaimJobs: no generated list of arguments")
	}
	var g []string // each argument appended, in order, and the ids ranged over
	for _, m := range regexp.MustCompile(`append\(queryParams, (arg\.\w+)\)|range (arg\.\w+)`).FindAllSubmatch(body[1], -1) {
		g = append(g, string(m[1])+string(m[2]))
	}
	h := append(gencheck.Fields(t, handList, gencheck.Func(t, "claim_writer.go", "ClaimJobsOn")), "arg.Ids")
	gencheck.Same(t, "ClaimJobs", g, h)
	if !regexp.MustCompile(`for _, v := range arg\.Ids \{\s+queryParams = append\(queryParams, v\)\s+\}\s+query = strings\.Replace\(query, "/\*SLICE:ids\*/\?"`).Match(
		gencheck.Func(t, "queues.sql.go", "ClaimJobs")) {
		t.Fatal("ClaimJobs: the generated function no longer binds the ids last, as its list (sqlc.slice)")
	}
	for i, text := range claimJobsListed {
		if n := strings.Count(text, "?"); n != 4+(i+1)*claimListStep || !strings.Contains(claimJobs, "/*SLICE:ids*/?") {
			t.Fatalf("ClaimJobs with a list of %d: %d parameters", (i+1)*claimListStep, n)
		}
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
