package pgdb

import (
	"regexp"
	"testing"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestClaimJobsEachIsClaimJobs: the hand-written ClaimJobsEach sends
// ClaimJobs's arguments in ClaimJobs's order and scans its columns into
// the same fields, so a change of the query (regenerated) that this file
// does not follow fails here rather than binding or reading the wrong
// column.
func TestClaimJobsEachIsClaimJobs(t *testing.T) {
	args := regexp.MustCompile(`(?s)q\.db\.Query\(ctx, claimJobs,(.*?)\)\n`)
	gen, hand := gencheck.Func(t, "queues.sql.go", "ClaimJobs"), gencheck.Func(t, "claim_each.go", "ClaimJobsEach")
	for _, re := range []*regexp.Regexp{args, gencheck.Scans} {
		gencheck.Same(t, "ClaimJobs: "+re.String(), gencheck.Fields(t, re, gen), gencheck.Fields(t, re, hand))
	}
}

// TestClaimJobsAndAckEachIsClaimJobsAndAck: ClaimJobsAndAckEach sends
// ClaimJobsAndAck's arguments in its order, its ack's ids and claims (as
// text) where the generated function sends arg.AckIds and arg.AckClaims,
// and scans the same columns, its last (acked) into a variable of its own.
func TestClaimJobsAndAckEachIsClaimJobsAndAck(t *testing.T) {
	args := regexp.MustCompile(`(?s)q\.db\.Query\(ctx, claimJobsAndAck,(.*?)\)\n`)
	gen, hand := gencheck.Func(t, "queues.sql.go", "ClaimJobsAndAck"), gencheck.Func(t, "claim_each.go", "ClaimJobsAndAckEach")
	want, got := gencheck.Fields(t, args, gen), gencheck.Fields(t, args, hand)
	for i, f := range want {
		switch f {
		case "arg.AckIds":
			want[i] = "ackIDs"
		case "arg.AckClaims":
			want[i] = "ackClaims"
		}
	}
	gencheck.Same(t, "ClaimJobsAndAck's arguments", want, got)
	want, got = gencheck.Fields(t, gencheck.Scans, gen), gencheck.Fields(t, gencheck.Scans, hand)
	if n := len(want); n > 0 && want[n-1] == "&i.Acked" {
		want[n-1] = "&acked"
	}
	gencheck.Same(t, "ClaimJobsAndAck's columns", want, got)
}
