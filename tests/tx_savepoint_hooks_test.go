package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// What a Tx arranges to follow the commit of an operation's writes (a
// group member's CommitTx moving its committed offset in memory, a wake)
// or their rollback (the member handing the event out again, a settled
// job's claim given back) follows a rollback to a savepoint made before
// the operation as it follows a rollback of the whole transaction: the
// writes are gone. Before (session 57), a ROLLBACK TO the application ran
// through tx.Exec dropped nothing: the commit moved the member past e1,
// whose commit was rolled back, so its next Recv returned e2 and its
// leave released the partition past e1, which no member of the group ever
// got (e1 lost to the group). Forms "released", "later savepoint" and
// "newest of a name" keep CommitTx(e1) (a savepoint released, or rolled
// back to after CommitTx), so e1 stays committed.
func TestGroupCommitTxRolledBackToASavepointIsHandedOutAgain(t *testing.T) {
	type form struct {
		name   string
		before []string // statements before CommitTx(e1)
		after  []string // after it
		undone bool     // CommitTx(e1) rolled back: e1 comes again
	}
	forms := []form{
		{"rollback to", []string{"SAVEPOINT before_commit"}, []string{"ROLLBACK TO SAVEPOINT before_commit"}, true},
		{"nested, inner released", []string{"SAVEPOINT outer_sp", "SAVEPOINT inner_sp"}, []string{"RELEASE SAVEPOINT inner_sp", "ROLLBACK TO outer_sp", "RELEASE outer_sp"}, true},
		{"case folded", []string{"savepoint Mixed_1"}, []string{"ROLLBACK TRANSACTION TO SAVEPOINT MIXED_1"}, true},
		{"in a text of several", []string{"SELECT 1; SAVEPOINT a; SELECT 2"}, []string{"SELECT 3; ROLLBACK TO a; RELEASE a"}, true},
		{"released", []string{"SAVEPOINT a"}, []string{"RELEASE SAVEPOINT a"}, false},
		{"later savepoint", []string{"SAVEPOINT a"}, []string{"SAVEPOINT b", "ROLLBACK TO SAVEPOINT b", "RELEASE a"}, false},
		{"newest of a name", []string{"SAVEPOINT a"}, []string{"SAVEPOINT a", "ROLLBACK TO SAVEPOINT a"}, false},
		{"quoted", []string{`SAVEPOINT "Q"`}, []string{"SAVEPOINT q", `ROLLBACK TO SAVEPOINT "Q"`}, true},
	}
	names := make([]string, len(forms))
	for i, f := range forms {
		names[i] = f.name
	}
	eachEngineEachForm(t, names, func(t *testing.T, e *engineEnv, i int) {
		f := forms[i]
		if f.name == "quoted" && e.name == "lite" {
			f.undone = false // SQLite compares names without regard to case: q is the newest "Q"
		}
		c := ctx(t)
		s, m, offs, e1 := oneMemberAtItsFirstEvent(t, e, "sp-group", "k", "k", "k")
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(c) }()
		exec := func(stmts []string) {
			for _, stmt := range stmts {
				_, err := tx.Exec(c, stmt)
				require.NoError(t, err, stmt)
			}
		}
		exec(f.before)
		require.NoError(t, m.CommitTx(c, tx, e1))
		exec(f.after)
		require.NoError(t, tx.Commit(c))

		want, lost := offs[0], "e1, whose CommitTx was rolled back to a savepoint, not handed out again"
		if !f.undone {
			want, lost = offs[1], "committed e1 handed out again"
		}
		next, err := m.Recv(c)
		require.NoError(t, err)
		t.Logf("%s, %s: next Recv = %d (e1 %d, e2 %d)", e.name, f.name, next.Offset, offs[0], offs[1])
		assert.Equal(t, want, next.Offset, lost)

		// The member leaves, releasing the partition at what it committed
		// or handled; the group's next member starts there.
		require.NoError(t, m.Leave(c))
		m2, err := s.Stream("sp-group").Group("g").Join(c, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour, SafetyPoll: time.Hour})
		require.NoError(t, err)
		defer func() { _ = m2.Leave(context.Background()) }()
		first, err := m2.Recv(c)
		require.NoError(t, err)
		t.Logf("%s, %s: the next member's first Recv = %d", e.name, f.name, first.Offset)
		if f.undone {
			assert.Equal(t, offs[0], first.Offset, "e1 lost to the group: the leave released the partition past it")
		} else {
			assert.Equal(t, offs[1], first.Offset, "committed e1 handed out again")
		}
	})
}

// A transactional handler that commits a group member's event in its
// transaction (CommitTx) and then fails: its writes are rolled back (on
// SQLite to the store's savepoint before the handler, whose transaction
// then records the retry and commits; on PostgreSQL whole), so the member
// hands the event out again. Before (session 57), on SQLite the commit of
// the retry moved the member past e1 all the same: its next Recv returned
// e2, and e1 was never handled.
func TestWorkTxHandlerFailingAfterCommitTxHandsTheEventOutAgain(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s, m, offs, e1 := oneMemberAtItsFirstEvent(t, e, "sp-worktx", "k", "k", "k")
		q := s.Queue("sp-worktx")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		declined := errors.New("declined after CommitTx")
		res, err := store.RunJobTx(c, claimOne(t, q), store.WorkOpts{Backoff: func(int) time.Duration { return time.Hour }},
			func(ctx context.Context, tx store.Tx, j *store.Job) error {
				if err := m.CommitTx(ctx, tx, e1); err != nil {
					return err
				}
				return declined
			})
		require.NoError(t, err)
		assert.Equal(t, store.OutcomeRetried, res.Outcome)
		assert.Equal(t, store.JobPending, jobState(t, q, id))

		next, err := m.Recv(c)
		require.NoError(t, err)
		t.Logf("%s: next Recv after the failed handler = %d (e1 %d, e2 %d)", e.name, next.Offset, offs[0], offs[1])
		assert.Equal(t, offs[0], next.Offset, "e1, whose CommitTx the failed handler's rollback undid, not handed out again")
	})
}

// A transactional handler that acks its own job behind a savepoint and
// rolls back to it, then returns nil: its job is not settled, so its
// worker completes it, as for a handler that never acked. Before (session
// 57), on both engines, the job counted as settled by the handler
// (OutcomeSettledByHandler) and nothing completed it: it stayed running
// until its claim lapsed, and ran again.
func TestWorkTxHandlerAckRolledBackToASavepointIsCompleted(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("sp-ack")
		id, err := q.Enqueue(c, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		res, err := store.RunJobTx(c, claimOne(t, q), store.WorkOpts{},
			func(ctx context.Context, tx store.Tx, j *store.Job) error {
				if _, err := tx.Exec(ctx, "SAVEPOINT maybe_ack"); err != nil {
					return err
				}
				if err := j.AckTx(ctx, tx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT maybe_ack")
				return err
			})
		require.NoError(t, err)
		t.Logf("%s: outcome %s, err %v", e.name, res.Outcome, res.Err)
		assert.Equal(t, store.OutcomeAcked, res.Outcome, "the handler's ack was rolled back: its worker completes the job")
		assert.True(t, jobGone(t, q, id)(), "job left running, its claim to lapse")
	})
}

// Query and QueryRow refuse savepoint statements (ErrInvalidArgument),
// which the store must see run to keep account of them: through Exec.
func TestTxQueryRefusesSavepointStatements(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(c) }()
		for _, stmt := range []string{"SAVEPOINT a", "SELECT 1; RELEASE a", "ROLLBACK TO a"} {
			_, err := tx.Query(c, stmt)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "Query(%q)", stmt)
			var x int
			require.ErrorIs(t, tx.QueryRow(c, stmt).Scan(&x), store.ErrInvalidArgument, "QueryRow(%q)", stmt)
		}
		_, err = tx.Exec(c, "SAVEPOINT a")
		require.NoError(t, err)
		_, err = tx.Exec(c, "RELEASE a")
		require.NoError(t, err)
		require.NoError(t, tx.Commit(c))
	})
}
