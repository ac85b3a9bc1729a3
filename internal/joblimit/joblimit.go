// Package joblimit says how a job's attempt limit reads to an operator, for
// the CLI and the web console alike.
package joblimit

import (
	"strconv"
	"strings"

	"github.com/alkstore/alkstore/store"
)

// Deliverers tells an outbox message without a limit of its own: it stores
// the 2^30 that stands for "the deliverer's OutboxOpts.MaxAttempts
// applies", a limit the database does not know and no job of a plain
// queue can be given.
func Deliverers(j *store.Job) bool {
	return strings.HasPrefix(j.Queue, store.OutboxQueuePrefix) && j.MaxAttempts >= 1<<30
}

// Text is j's limit as a page or table shows it: the number, or "-" where
// the deliverer's limit governs.
func Text(j *store.Job) string {
	if Deliverers(j) {
		return "-"
	}
	return strconv.Itoa(j.MaxAttempts)
}
