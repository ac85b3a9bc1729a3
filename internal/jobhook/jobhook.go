// Package jobhook lets alktest reach two store operations that are not part
// of store's public API: claiming one given job, and reading a queue's jobs
// in every state in one snapshot. Package store registers them when it is
// initialised (it imports this package; this package cannot import it, so
// the types are parameters that alktest names).
package jobhook

import (
	"context"
	"time"
)

// Hooks are the operations, for Q = *store.Queue, Tx = store.Tx and
// Job = *store.Job.
type Hooks[Q, Tx, Job any] struct {
	// ClaimJob claims the job id of q for worker, holding it for
	// visibility: in tx when tx is not nil, else on its own. It returns nil
	// (and no error) when the job is not claimable: not pending nor a
	// lapsed claim with attempts left, past its ExpiresAt, of a paused
	// queue, or not of q. A pending job is claimed whether or not it is due.
	ClaimJob func(ctx context.Context, q Q, tx *Tx, id int64, worker string, visibility time.Duration) (Job, error)
	// ScanJobs hands fn q's jobs, every state, in id order, page by page
	// (at most size each), until fn returns false or the jobs end. In tx
	// when tx is not nil (what tx sees); else in a read-only transaction of
	// its own that is one snapshot on both engines (REPEATABLE READ on
	// PostgreSQL) and takes no writer slot on SQLite.
	ScanJobs func(ctx context.Context, q Q, tx *Tx, size int, fn func(page []Job) bool) error
}

var hooks any

// Set registers the hooks (package store does, once).
func Set[Q, Tx, Job any](h Hooks[Q, Tx, Job]) { hooks = h }

// Get returns the hooks package store registered.
func Get[Q, Tx, Job any]() Hooks[Q, Tx, Job] { return hooks.(Hooks[Q, Tx, Job]) }
