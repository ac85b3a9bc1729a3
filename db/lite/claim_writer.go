package litedb

// Written by hand, not by sqlc: the statements of a claim's and of a
// worker's ack's transactions, run on a litedriver.Writer (inside
// litedriver.WriteTx's transaction, without database/sql's: its
// transaction's goroutine, its statement per transaction and its row
// plumbing cost a one-job claim about as much as the statements' own
// setup). TestClaimWriterIsGenerated holds their statements, arguments and
// columns to the generated functions'.

import (
	"database/sql"
	"slices"
	"strings"

	"github.com/alkstore/alkstore/internal/litedriver"
)

// ClaimableRow is a row of ClaimableJobs or ClaimableReadyJobs as
// ClaimableJobsOn and ClaimableReadyJobsOn read it: LastError, Errors and
// Headers are SQLite's bytes, nil for NULL (and for an empty text), valid
// only until the next row; ExpiresAt is Valid unless NULL. Payload is the
// row's own copy (nil for NULL, empty for an empty BLOB).
type ClaimableRow struct {
	ID          int64
	Payload     litedriver.Blob
	Priority    int64
	Attempts    int64
	MaxAttempts int64
	CreatedAt   int64
	RunAt       int64
	ExpiresAt   sql.NullInt64
	LastError   []byte
	Errors      []byte
	Headers     []byte
}

// readClaimable reads r, a row of ClaimableJobs or ClaimableReadyJobs,
// into i, its columns in the statement's order.
func readClaimable(r *litedriver.Row, i *ClaimableRow) {
	i.ID = r.Int64(0)
	i.Payload = r.Blob(1)
	i.Priority = r.Int64(2)
	i.Attempts = r.Int64(3)
	i.MaxAttempts = r.Int64(4)
	i.CreatedAt = r.Int64(5)
	i.RunAt = r.Int64(6)
	i.ExpiresAt = r.NullInt64(7)
	i.LastError = r.Bytes(8)
	i.Errors = r.Bytes(9)
	i.Headers = r.Bytes(10)
}

// ClaimableJobsOn runs ClaimableJobs's statement on w and hands each row
// to each as it is read, in one ClaimableRow reused for every row. each
// may keep a row's Payload, and must copy what it keeps of the rest.
func (q *Queries) ClaimableJobsOn(w *litedriver.Writer, arg ClaimableJobsParams, each func(*ClaimableRow)) error {
	var i ClaimableRow
	return w.Query(claimableJobs, func(r *litedriver.Row) error {
		readClaimable(r, &i)
		each(&i)
		return nil
	}, arg.Queue, arg.Now, arg.MaxJobs)
}

// ClaimableReadyJobsOn runs ClaimableReadyJobs's statement on w as
// ClaimableJobsOn runs ClaimableJobs's.
func (q *Queries) ClaimableReadyJobsOn(w *litedriver.Writer, arg ClaimableReadyJobsParams, each func(*ClaimableRow)) error {
	var i ClaimableRow
	return w.Query(claimableReadyJobs, func(r *litedriver.Row) error {
		readClaimable(r, &i)
		each(&i)
		return nil
	}, arg.MaxJobs, arg.Queue, arg.Now)
}

// BuryExhaustedClaimsOn runs BuryExhaustedClaims's statement on w and
// returns the rows it changed.
func (q *Queries) BuryExhaustedClaimsOn(w *litedriver.Writer, arg BuryExhaustedClaimsParams) (int64, error) {
	_, n, err := w.Exec(buryExhaustedClaims, arg.Now, arg.Queue)
	return n, err
}

// ClaimJobsOn runs ClaimJobs's statement on w and returns the rows it
// stamped, its ids sent by execListed (runs without a gap by
// ClaimJobsInRange's statement).
func (q *Queries) ClaimJobsOn(w *litedriver.Writer, arg ClaimJobsParams) (int64, error) {
	return execListed(w, claimJobsListed, claimJobsInRange, arg.Ids,
		arg.Now,
		arg.ClaimExpiresAt,
		arg.ClaimToken,
		arg.Worker,
	)
}

// execListed runs a statement whose last parameter is a list of ids
// (sqlc.slice) on w and returns the rows it changed. Each run of at least
// rangeMin ids without a gap (n, n+1, n+2, ...) goes to ranged, the same
// statement with the list in place of a range of ids (its last two
// parameters, the run's first and last id): the ids between the two are
// the run's, and no others. The rest go in lists: for each run of at most
// listMost of them, the statement of listed (see listed) whose list is
// as long as the run rounded up to a multiple of listStep, args bound to
// its first parameters and the slots past the run NULL. The generated
// functions write the list as long as the ids; here a handful of lengths
// serve every call, each prepared once per connection (see
// Writer.ExecList). An id given twice is sent twice (in a list, or in
// a range and a list), as the generated function sends it.
func execListed(w *litedriver.Writer, listed []string, ranged string, ids []int64, args ...any) (int64, error) {
	var changed int64
	if len(ids) >= rangeMin {
		sorted := slices.Clone(ids)
		slices.Sort(sorted)
		rest := sorted[:0] // the ids of the short runs, kept in place
		for i := 0; i < len(sorted); {
			j := i + 1
			for j < len(sorted) && sorted[j] == sorted[j-1]+1 {
				j++
			}
			if j-i < rangeMin {
				rest = append(rest, sorted[i:j]...)
				i = j
				continue
			}
			_, n, err := w.Exec(ranged, append(args[:len(args):len(args)], sorted[i], sorted[j-1])...)
			if err != nil {
				return changed, err
			}
			changed += n
			i = j
		}
		ids = rest
	}
	for len(ids) > 0 {
		run := ids[:min(len(ids), listMost)]
		ids = ids[len(run):]
		slots := (len(run) + listStep - 1) / listStep * listStep
		_, n, err := w.ExecList(listed[slots/listStep-1], slots, run, args...)
		if err != nil {
			return changed, err
		}
		changed += n
	}
	return changed, nil
}

// listStep and listMost: the lengths of execListed's lists of ids (one
// statement each). rangeMin: the fewest ids without a gap that execListed
// sends as a range: a statement of its own costs about what 8 slots of a
// list do (callgrind, SQLite alone: a slot about 3-3.5k instructions, used
// or NULL; a statement's own setup and cursors about 25k). Measured on a
// loop of Claim and AckMany whose claims are runs of 8 and of 12 ids
// (callgrind of the whole process, SQLite's share a job, the difference of
// 16,000 and 6,000 jobs): with rangeMin 16 (their ids in lists of 16
// slots) 115.2k and 102.0k, with 8 (ranges) 96.8k and 88.7k; a burn-down,
// whose claims and acks are runs of 100, does not move.
const (
	listStep = 16
	listMost = 128
	rangeMin = 8
)

// listed is query, a generated statement with a list of ids
// (sqlc.slice), with its list listStep, 2*listStep, ... listMost long.
func listed(query string) []string {
	texts := make([]string, listMost/listStep)
	for i := range texts {
		texts[i] = strings.Replace(query, "/*SLICE:ids*/?", strings.Repeat(",?", (i+1)*listStep)[1:], 1)
	}
	return texts
}

// The statements execListed sends, by listed.
var (
	claimJobsListed           = listed(claimJobs)
	ackJobsOfClaimListed      = listed(ackJobsOfClaim)
	completeJobsOfClaimListed = listed(completeJobsOfClaim)
)

// ClaimJobOn runs ClaimJob's statement on w and returns the rows it
// stamped.
func (q *Queries) ClaimJobOn(w *litedriver.Writer, arg ClaimJobParams) (int64, error) {
	_, n, err := w.Exec(claimJob,
		arg.Now,
		arg.ClaimExpiresAt,
		arg.ClaimToken,
		arg.Worker,
		arg.ID,
	)
	return n, err
}

// AckJobOn runs AckJob's statement on w and returns the rows it deleted.
func (q *Queries) AckJobOn(w *litedriver.Writer, arg AckJobParams) (int64, error) {
	_, n, err := w.Exec(ackJob, arg.ID, arg.ClaimToken, arg.Now)
	return n, err
}

// CompleteJobOn runs CompleteJob's statement on w and returns the rows it
// completed.
func (q *Queries) CompleteJobOn(w *litedriver.Writer, arg CompleteJobParams) (int64, error) {
	_, n, err := w.Exec(completeJob, arg.Now, arg.ID, arg.ClaimToken)
	return n, err
}

// AckJobsCountedOn runs AckJobsCounted's statement on w and returns the
// rows it deleted.
func (q *Queries) AckJobsCountedOn(w *litedriver.Writer, arg AckJobsCountedParams) (int64, error) {
	_, n, err := w.Exec(ackJobsCounted, arg.Claims, arg.Now, arg.Queue)
	return n, err
}

// CompleteJobsCountedOn runs CompleteJobsCounted's statement on w and
// returns the rows it completed.
func (q *Queries) CompleteJobsCountedOn(w *litedriver.Writer, arg CompleteJobsCountedParams) (int64, error) {
	_, n, err := w.Exec(completeJobsCounted, arg.Now, arg.Claims)
	return n, err
}

// QueueKeepsCompletedOn runs QueueKeepsCompleted's statement on w.
func (q *Queries) QueueKeepsCompletedOn(w *litedriver.Writer, queue string) (bool, error) {
	var keeps bool
	err := w.Query(queueKeepsCompleted, func(r *litedriver.Row) error {
		keeps = r.Int64(0) != 0
		return nil
	}, queue)
	return keeps, err
}

// AckJobsOfClaimOn runs AckJobsOfClaim's statement on w and returns the
// rows it deleted, its list of ids sent by execListed.
func (q *Queries) AckJobsOfClaimOn(w *litedriver.Writer, arg AckJobsOfClaimParams) (int64, error) {
	return execListed(w, ackJobsOfClaimListed, ackJobsOfClaimInRange, arg.Ids, arg.ClaimToken, arg.Now, arg.Queue)
}

// CompleteJobsOfClaimOn runs CompleteJobsOfClaim's statement on w and
// returns the rows it completed, its list of ids sent by execListed.
func (q *Queries) CompleteJobsOfClaimOn(w *litedriver.Writer, arg CompleteJobsOfClaimParams) (int64, error) {
	return execListed(w, completeJobsOfClaimListed, completeJobsOfClaimInRange, arg.Ids, arg.Now, arg.ClaimToken, arg.Queue)
}

// HeartbeatJobsOn runs HeartbeatJobs's statement on w and returns the ids
// it extended.
func (q *Queries) HeartbeatJobsOn(w *litedriver.Writer, arg HeartbeatJobsParams) ([]int64, error) {
	var ids []int64
	err := w.Query(heartbeatJobs, func(r *litedriver.Row) error {
		ids = append(ids, r.Int64(0))
		return nil
	}, arg.ClaimExpiresAt, arg.Claims, arg.Now)
	return ids, err
}
