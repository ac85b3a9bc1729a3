package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/alkstore/alkstore/store"
)

func (a *app) printQueues(queues []store.QueueInfo) error {
	t := newTable(a.out, "QUEUE", "PAUSED", "READY", "SCHEDULED", "RUNNING", "DEAD", "COMPLETED", "CANCELLED", "EXPIRED", "OLDEST READY")
	c := func(n int64) string { return count(n, store.StatsCountLimit) }
	for _, q := range queues {
		name := q.Name
		if q.Outbox != "" {
			name = "outbox " + q.Outbox
		}
		paused := "-"
		if q.Paused {
			paused = "paused"
		}
		oldest := "-"
		if q.Stats.OldestReady > 0 {
			oldest = short(q.Stats.OldestReady)
		}
		s := q.Stats
		t.row(name, paused, c(s.Ready), c(s.Scheduled), c(s.Running), c(s.Dead), c(s.Completed), c(s.Cancelled), c(s.Expired), oldest)
	}
	return t.flush()
}

func (a *app) queuesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "queues", Aliases: []string{"queue"},
		Short: "List queues and their jobs; enqueue, cancel, delete, requeue, pause, resume",
		Long: `List queues and their jobs; enqueue, cancel, delete, requeue, pause, resume.

queues list shows an outbox by its own name ("outbox webhooks"); jobs and
requeue take that name with --outbox (queues jobs --outbox webhooks --state
dead, queues requeue --outbox webhooks --all-dead); queues job ID reads a job
or message whatever its queue. cancel and delete refuse an outbox's message:
the store has no such operation for one.`}
	cmd.AddCommand(listCommand(a, "list", "Every queue (idle ones too) with its counts by state",
		(*store.Store).Queues, toQueueJSON, a.printQueues), a.jobsCmd(), a.jobCmd(), a.enqueueCmd(),
		a.jobActionCmd("cancel", "Cancel a pending or running job (a running handler is told to stop)", (*store.Queue).Cancel),
		a.jobActionCmd("delete", "Delete a job that is not running", (*store.Queue).Delete),
		a.requeueCmd(),
		a.queueActionCmd("pause", "Stop workers everywhere from claiming the queue's jobs", (*store.Queue).Pause),
		a.queueActionCmd("resume", "Let workers claim the queue's jobs again", (*store.Queue).Resume))
	return cmd
}

func (a *app) jobsCmd() *cobra.Command {
	var state string
	var after int64
	var limit int
	var outbox bool
	cmd := &cobra.Command{
		Use:   "jobs QUEUE",
		Short: "A page of a queue's jobs (--outbox: an outbox's messages) in one state, in id order",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit <= 0 { // as tail and heads: 0 read as the default lost the next-page hint
				return badInput("--limit must be positive")
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			src, err := jobSourceOf(st, args[0], outbox)
			if err != nil {
				return err
			}
			jobs, err := src.Jobs(cmd.Context(), store.JobsOpts{State: store.JobState(state), After: after, Limit: limit})
			if err != nil {
				return err
			}
			if len(jobs) == 0 {
				if after == 0 && !outbox {
					a.hintOutbox(cmd.Context(), st, args[0], store.JobState(state))
				}
				if err := queueMustExist(cmd.Context(), st, args[0], outbox); err != nil {
					return err
				}
			}
			if a.json {
				for _, j := range jobs {
					if err := jsonLine(a.out, toJobJSON(j)); err != nil {
						return err
					}
				}
				return nil
			}
			now := time.Now()
			t := newTable(a.out, "ID", "STATE", "ATTEMPTS", "PRIORITY", "CREATED", "RUN AT", "FINISHED", "LAST ERROR", "PAYLOAD")
			for _, j := range jobs {
				t.row(j.ID, j.State, attemptsCell(j), j.Priority, agoT(j.CreatedAt, now),
					agoT(j.RunAt, now), ago(j.FinishedAt, now), orDash(j.LastError, 40), preview(j.Payload, 40))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if len(jobs) > 0 && len(jobs) == limit {
				fmt.Fprintf(a.errOut, "next page: --after %d\n", jobs[len(jobs)-1].ID)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", "pending", "pending, running, completed, cancelled, expired or dead")
	cmd.Flags().Int64Var(&after, "after", 0, "the last id of the previous page")
	cmd.Flags().IntVarP(&limit, "limit", "n", store.DefaultJobsLimit, "jobs per page")
	cmd.Flags().BoolVar(&outbox, "outbox", false, outboxFlagUsage)
	return cmd
}

// queueMustExist refuses a queue (with outbox, an outbox) of which nothing
// is stored, neither a job nor its settings row (Store.Queues lists both:
// a row is written by Pause, Configure, a worker's claims or Enqueue). A
// mistyped name's empty page read as an idle queue's, exit 0 (attack60 F4).
func queueMustExist(ctx context.Context, st *store.Store, name string, outbox bool) error {
	stored := name
	if outbox {
		stored = store.OutboxQueuePrefix + name
	}
	queues, err := st.Queues(ctx)
	if err != nil {
		return err
	}
	for _, q := range queues {
		if q.Name == stored {
			return nil
		}
	}
	what := "queue"
	if outbox {
		what = "outbox"
	}
	return fmt.Errorf("%s %q: %w", what, name, store.ErrNotFound)
}

func (a *app) jobCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "job ID",
		Short: "One job, whatever its queue, with its payload and every attempt's error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			j, err := st.Job(cmd.Context(), id)
			if err != nil {
				return err
			}
			if a.json {
				return jsonLine(a.out, toJobJSON(j))
			}
			now := time.Now()
			t := newTable(a.out, "FIELD", "VALUE")
			t.row("id", j.ID)
			t.row("queue", queueCell(j.Queue))
			t.row("state", j.State)
			t.row("attempts", attemptsLine(j))
			t.row("priority", j.Priority)
			t.row("created", agoT(j.CreatedAt, now))
			t.row("run at", agoT(j.RunAt, now))
			t.row("claimed", ago(j.ClaimedAt, now))
			t.row("claim expires", ago(j.ClaimExpiresAt, now))
			t.row("expires", ago(j.ExpiresAt, now))
			t.row("finished", ago(j.FinishedAt, now))
			t.row("worker", cmpOr(j.Worker, "-"))
			t.row("last error", orDash(j.LastError, 200))
			t.row("payload", preview(j.Payload, 200))
			if err := t.flush(); err != nil {
				return err
			}
			if len(j.Errors) > 0 {
				fmt.Fprintln(a.out, "\nATTEMPT ERRORS")
				t := newTable(a.out, "ATTEMPT", "AT", "ERROR")
				for _, e := range j.Errors {
					t.row(e.Attempt, agoT(e.At, now), preview([]byte(e.Error), 200))
				}
				return t.flush()
			}
			return nil
		},
	}
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, badInput("job id %q: want a positive number", s)
	}
	return id, nil
}

func (a *app) enqueueCmd() *cobra.Command {
	var opts store.EnqueueOpts
	cmd := &cobra.Command{
		Use:   "enqueue QUEUE [PAYLOAD|-]",
		Short: "Add a job (payload from the argument, or stdin with -); prints its id",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			payload, err := payloadArg(args[1:])
			if err != nil {
				return err
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			id, err := st.Queue(args[0]).Enqueue(cmd.Context(), payload, opts)
			if err != nil {
				return err
			}
			if a.json {
				return jsonLine(a.out, map[string]int64{"id": id})
			}
			fmt.Fprintln(a.out, id)
			return nil
		},
	}
	cmd.Flags().IntVar(&opts.Priority, "priority", 0, "higher runs first")
	cmd.Flags().DurationVar(&opts.Delay, "delay", 0, "run after this long (e.g. 90s, 2h)")
	cmd.Flags().IntVar(&opts.MaxAttempts, "max-attempts", 0, "claims before it dies (0: the default, 25)")
	return cmd
}

// jobActionCmd is queues cancel and queues delete. The store has no such
// operation on an outbox's messages (Outbox offers Requeue and
// RequeueDead), so --outbox, an outbox's backing queue name and the id of
// an outbox's message are refused, saying so (exit 2).
func (a *app) jobActionCmd(verb, short string, act func(*store.Queue, context.Context, int64) error) *cobra.Command {
	var outbox bool
	cmd := &cobra.Command{
		Use:   verb + " QUEUE ID",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[1])
			if err != nil {
				return err
			}
			if ob, found := strings.CutPrefix(args[0], store.OutboxQueuePrefix); found || outbox {
				return outboxActionRefused(verb, cmpOr(ob, args[0]), "")
			}
			ctx := cmd.Context()
			st, err := a.store(ctx)
			if err != nil {
				return err
			}
			if err := act(st.Queue(args[0]), ctx, id); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					if j, jerr := st.Job(ctx, id); jerr == nil {
						if ob, found := strings.CutPrefix(j.Queue, store.OutboxQueuePrefix); found {
							return outboxActionRefused(verb, ob, fmt.Sprintf("job %d is a message of outbox %s, not a job of queue %s; ", id, ob, args[0]))
						}
					}
				}
				return err
			}
			return a.done(map[string]any{"action": verb, "queue": args[0], "id": id}, "job %d: %s", id, pastTense(verb))
		},
	}
	cmd.Flags().BoolVar(&outbox, "outbox", false, "refused: an outbox's messages cannot be "+pastTense(verb)+" (the store has no such operation for them)")
	return cmd
}

// outboxActionRefused is why queues cancel or delete refuses a message of
// outbox (note, unless empty, says how the command named it): the store
// has no such operation for an outbox's messages.
func outboxActionRefused(verb, outbox, note string) error {
	return badInput("queues %s: %san outbox's messages cannot be %s: the store has no such operation for them "+
		"(a committed message is delivered, or dead once its deliverer's MaxAttempts ran out); "+
		"queues jobs --outbox %s lists them, queues requeue --outbox %s ID sends a dead one back",
		verb, note, pastTense(verb), outbox, outbox)
}

func pastTense(verb string) string {
	switch verb {
	case "cancel":
		return "cancelled"
	case "delete":
		return "deleted"
	case "pause":
		return "paused"
	case "resume":
		return "resumed"
	}
	return verb + "ed"
}

func (a *app) queueActionCmd(verb, short string, act func(*store.Queue, context.Context) error) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " QUEUE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			if err := act(st.Queue(args[0]), cmd.Context()); err != nil {
				return err
			}
			return a.done(map[string]any{"action": verb, "queue": args[0]}, "queue %s: %s", args[0], pastTense(verb))
		},
	}
}

func (a *app) requeueCmd() *cobra.Command {
	var allDead, outbox bool
	cmd := &cobra.Command{
		Use:   "requeue QUEUE [ID]",
		Short: "Put a dead, cancelled or expired job back to pending (--all-dead: every dead job; --outbox: an outbox's)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			switch {
			case allDead && len(args) == 2:
				return badInput("give a job ID or --all-dead, not both")
			case !allDead && len(args) < 2:
				return badInput("requeue %s: which job? give its ID, or --all-dead for every dead job", args[0])
			}
			st, err := a.store(ctx)
			if err != nil {
				return err
			}
			src, err := jobSourceOf(st, args[0], outbox)
			if err != nil {
				return err
			}
			if !allDead {
				id, err := parseID(args[1])
				if err != nil {
					return err
				}
				if err := src.Requeue(ctx, id); err != nil {
					return err
				}
				result := map[string]any{"action": "requeue", "queue": args[0], "id": id}
				if outbox {
					result = map[string]any{"action": "requeue", "outbox": args[0], "id": id}
				}
				return a.done(result, "job %d: requeued", id)
			}
			n, err := a.requeueAllDead(ctx, src)
			if err != nil {
				// No success line for a failed call; the batches that
				// committed before the failure are said in its error.
				if n > 0 {
					return fmt.Errorf("requeued %d dead jobs of %s%s, then: %w", n, outboxWord(outbox), args[0], err)
				}
				return err
			}
			if a.json {
				return jsonLine(a.out, map[string]int64{"requeued": n})
			}
			fmt.Fprintf(a.errOut, "requeued %d dead jobs of %s%s\n", n, outboxWord(outbox), args[0])
			if n == 0 && !outbox {
				a.hintOutbox(ctx, st, args[0], store.JobDead)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&allDead, "all-dead", false, "requeue every dead job of the queue")
	cmd.Flags().BoolVar(&outbox, "outbox", false, outboxFlagUsage)
	return cmd
}

// requeueAllDead runs RequeueDead while drawing a progress bar on stderr
// from the queue's (or outbox's) dead count.
func (a *app) requeueAllDead(ctx context.Context, q jobSource) (int64, error) {
	before, err := q.Stats(ctx)
	if err != nil {
		return 0, err
	}
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := q.RequeueDead(ctx)
		done <- result{n, err}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	drawn := false
	for {
		select {
		case r := <-done:
			// The bar ends full only on success; a failure's bar says
			// what the batches before it moved, if it says anything.
			switch {
			case before.Dead == 0:
			case r.err == nil:
				a.progress(before.Dead, before.Dead)
				fmt.Fprintln(a.errOut)
			case drawn || r.n > 0:
				a.progress(min(r.n, before.Dead), before.Dead)
				fmt.Fprintln(a.errOut)
			}
			return r.n, r.err
		case <-tick.C:
			if now, err := q.Stats(ctx); err == nil && before.Dead > 0 {
				a.progress(max(before.Dead-now.Dead, 0), before.Dead)
				drawn = true
			}
		}
	}
}

func (a *app) progress(done, total int64) {
	const width = 30
	filled := int(float64(width) * float64(done) / float64(total))
	filled = min(max(filled, 0), width)
	fmt.Fprintf(a.errOut, "\r[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
}

func orDash(s string, n int) string {
	if s == "" {
		return "-"
	}
	return preview([]byte(s), n)
}
