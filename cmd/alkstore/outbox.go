package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/alkstore/alkstore/internal/joblimit"
	"github.com/alkstore/alkstore/store"
)

const outboxFlagUsage = "QUEUE is an outbox's name (as queues list shows it: outbox NAME)"

// jobSource is what queues jobs and queues requeue page and act on: a
// queue, or with --outbox an outbox, both named as queues list names them.
type jobSource interface {
	Jobs(context.Context, store.JobsOpts) ([]*store.Job, error)
	Requeue(context.Context, int64) error
	RequeueDead(context.Context) (int64, error)
	Stats(context.Context) (store.QueueStats, error)
}

// jobSourceOf returns the queue or outbox called name. An outbox's backing
// queue name is refused with the spelling that reaches it: the store
// refuses it as reserved anyway, and the operator who copied it from a
// job's queue field wants the outbox.
func jobSourceOf(st *store.Store, name string, outbox bool) (jobSource, error) {
	if ob, found := strings.CutPrefix(name, store.OutboxQueuePrefix); found && !outbox {
		return nil, badInput("%q is the queue behind outbox %q: pass --outbox %s", name, ob, ob)
	}
	if outbox {
		return st.Outbox(name), nil
	}
	return st.Queue(name), nil
}

// hintOutbox says on stderr that an outbox shares the queue's name and has
// jobs in state, when a queue's page or requeue came back empty: the same
// name in queues list may be either, and the plain queue is rarely the one
// meant then. A failed count says nothing: the hint is a courtesy.
func (a *app) hintOutbox(ctx context.Context, st *store.Store, name string, state store.JobState) {
	s, err := st.Outbox(name).Stats(ctx)
	if err != nil {
		return
	}
	n := map[store.JobState]int64{store.JobPending: s.Ready + s.Scheduled, store.JobRunning: s.Running, store.JobDead: s.Dead,
		store.JobCompleted: s.Completed, store.JobCancelled: s.Cancelled, store.JobExpired: s.Expired}[state]
	if n > 0 {
		fmt.Fprintf(a.errOut, "queue %s has none; outbox %s has %s %s: add --outbox\n", name, name, count(n, store.StatsCountLimit), state)
	}
}

func outboxWord(outbox bool) string {
	if outbox {
		return "outbox "
	}
	return ""
}

// attemptsLine is queues job's attempts: "2 of 25", or for an outbox
// message that the deliverer's limit governs, which the database does not
// know, that instead of 1073741824.
func attemptsLine(j *store.Job) string {
	if joblimit.Deliverers(j) {
		return fmt.Sprintf("%d (the limit is the outbox deliverer's MaxAttempts, 25 by default)", j.Attempts)
	}
	return fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts)
}

// attemptsCell is attemptsLine in queues jobs' ATTEMPTS column.
func attemptsCell(j *store.Job) string {
	return fmt.Sprintf("%d/%s", j.Attempts, joblimit.Text(j))
}

// queueCell names a job's queue as queues list does: an outbox's by the
// outbox's own name, the one --outbox takes.
func queueCell(queue string) string {
	if ob, found := strings.CutPrefix(queue, store.OutboxQueuePrefix); found {
		return "outbox " + ob
	}
	return queue
}
