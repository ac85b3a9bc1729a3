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
	// The statements with a list of ids (sqlc.slice), which comes last:
	// the generated function appends each argument, then the ids;
	// execListed binds its arguments, then the list, in the statement's
	// texts listed made of the generated one.
	handList := regexp.MustCompile(`(?s)execListed\(w, (\w+), (\w+), arg\.Ids,(.*?)\)\n`)
	for name, st := range map[string]struct {
		query, ranged string
		texts         []string
	}{
		"ClaimJobs":           {claimJobs, claimJobsInRange, claimJobsListed},
		"AckJobsOfClaim":      {ackJobsOfClaim, ackJobsOfClaimInRange, ackJobsOfClaimListed},
		"CompleteJobsOfClaim": {completeJobsOfClaim, completeJobsOfClaimInRange, completeJobsOfClaimListed},
	} {
		constName := strings.ToLower(name[:1]) + name[1:]
		gen := gencheck.Func(t, "queues.sql.go", name)
		body := regexp.MustCompile(`(?s)query := ` + constName + `\n(.*?)\n\tresult, err := q\.exec\(ctx, nil, query, queryParams\.\.\.\)`).FindSubmatch(gen)
		if body == nil {
			t.Fatalf("%s: no generated list of arguments", name)
		}
		var g []string // each argument appended, in order, and the ids ranged over
		for _, m := range regexp.MustCompile(`append\(queryParams, (arg\.\w+)\)|range (arg\.\w+)`).FindAllSubmatch(body[1], -1) {
			g = append(g, string(m[1])+string(m[2]))
		}
		h := gencheck.Fields(t, handList, gencheck.Func(t, "claim_writer.go", name+"On"))
		if h[0] != constName+"Listed" {
			t.Fatalf("%s: execListed sends %s", name, h[0])
		}
		gencheck.Same(t, name, g, append(h[2:], "arg.Ids"))
		// Its runs without a gap go to the statement named name+"InRange",
		// the same statement with a range of ids (first, last) for the
		// list, its arguments bound as the list form's, then the two ids.
		if h[1] != constName+"InRange" {
			t.Fatalf("%s: execListed sends its runs to %s", name, h[1])
		}
		gr := gencheck.Fields(t, genExec, gencheck.Func(t, "queues.sql.go", name+"InRange"))
		gencheck.Same(t, name+"InRange", gr, append([]string{h[1]}, append(h[2:len(h):len(h)], "arg.FirstID", "arg.LastID")...))
		if strings.NewReplacer("-- name: "+name+" ", "-- name: "+name+"InRange ", "id IN (/*SLICE:ids*/?)", "id BETWEEN CAST(?"+strconv.Itoa(len(h)-1)+" AS INTEGER) AND CAST(?"+strconv.Itoa(len(h))+" AS INTEGER)").Replace(st.query) != st.ranged {
			t.Fatalf("%s: its range form is not the same statement with a range for the list:\n%s", name, st.ranged)
		}
		if !regexp.MustCompile(`for _, v := range arg\.Ids \{\s+queryParams = append\(queryParams, v\)\s+\}\s+query = strings\.Replace\(query, "/\*SLICE:ids\*/\?"`).Match(gen) {
			t.Fatalf("%s: the generated function no longer binds the ids last, as its list (sqlc.slice)", name)
		}
		if !strings.Contains(st.query, "/*SLICE:ids*/?") {
			t.Fatalf("%s: no list of ids in its statement", name)
		}
		for i, text := range st.texts {
			if n := strings.Count(text, "?"); n != strings.Count(st.query, "?")-1+(i+1)*listStep {
				t.Fatalf("%s with a list of %d: %d parameters", name, (i+1)*listStep, n)
			}
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
	genRow := regexp.MustCompile(`(?s)q\.queryRow\(ctx, q\.\w+Stmt, (\w+),(.*?)\)\n`)
	gencheck.Same(t, "QueueKeepsCompleted", gencheck.Fields(t, genRow, gencheck.Func(t, "queues.sql.go", "QueueKeepsCompleted")),
		gencheck.Fields(t, handQuery, gencheck.Func(t, "claim_writer.go", "QueueKeepsCompletedOn")))
}

// TestClaimStampCastsNothingPerRow: the claim's stamps (ClaimJobs, its
// range form, ClaimJob) set their columns from the parameters uncast:
// SQLite evaluates an UPDATE's SET expressions for every row it changes,
// so a CAST there runs once a job (about 0.85k instructions a job of a
// claim of 100 for the four; callgrind).
func TestClaimStampCastsNothingPerRow(t *testing.T) {
	for name, query := range map[string]string{"ClaimJobs": claimJobs, "ClaimJobsInRange": claimJobsInRange, "ClaimJob": claimJob} {
		set := regexp.MustCompile(`(?s)\nSET (.*?)\nWHERE `).FindStringSubmatch(query)
		if set == nil {
			t.Fatalf("%s: no SET clause:\n%s", name, query)
		}
		if strings.Contains(strings.ToUpper(set[1]), "CAST(") {
			t.Errorf("%s casts in its SET, once a row: %s", name, set[1])
		}
	}
}

// TestClaimAckFencesWithoutTheState: a worker's ack of a claim's jobs
// (AckJobsOfClaim, CompleteJobsOfClaim, their range forms) is fenced by
// the claim's token and expiry alone: alk_jobs's CHECK makes a row that
// holds both a running one, and a test of the state's text costs every
// row (about 0.7k instructions a job; callgrind).
func TestClaimAckFencesWithoutTheState(t *testing.T) {
	for name, query := range map[string]string{"AckJobsOfClaim": ackJobsOfClaim, "AckJobsOfClaimInRange": ackJobsOfClaimInRange,
		"CompleteJobsOfClaim": completeJobsOfClaim, "CompleteJobsOfClaimInRange": completeJobsOfClaimInRange} {
		where := query[strings.Index(query, "\nWHERE "):]
		if !strings.Contains(where, "claim_token = CAST(?") || !strings.Contains(where, "claim_expires_at > CAST(?") {
			t.Errorf("%s: not fenced by the claim's token and expiry:\n%s", name, where)
		}
		if strings.Contains(where, "state =") {
			t.Errorf("%s tests the state, once a row:\n%s", name, where)
		}
	}
}
