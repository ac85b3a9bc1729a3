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
