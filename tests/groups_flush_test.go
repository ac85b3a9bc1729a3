package tests

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// refuseGroupCommits installs a trigger that fails every commit of a
// group's offset (an update raising committed_offset of a partition that
// keeps its owner: not a claim, a renewal or a release) while the flag
// table refuse_commits says so; set it with refuse.
func refuseGroupCommits(t *testing.T, e *engineEnv) (refuse func(bool)) {
	t.Helper()
	if e.name == "pg" {
		e.execSQL(t, `CREATE TABLE public.refuse_commits (refuse boolean NOT NULL)`,
			`INSERT INTO public.refuse_commits VALUES (false)`,
			`CREATE FUNCTION public.refuse_group_commits() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF (SELECT refuse FROM public.refuse_commits) THEN RAISE EXCEPTION 'the test refuses group commits'; END IF;
				RETURN NEW; END $$`,
			`CREATE TRIGGER refuse_group_commits BEFORE UPDATE ON alkstore.group_partitions FOR EACH ROW
				WHEN (NEW.owner IS NOT NULL AND NEW.committed_offset > OLD.committed_offset) EXECUTE FUNCTION public.refuse_group_commits()`)
		return func(on bool) { e.execSQL(t, fmt.Sprintf(`UPDATE public.refuse_commits SET refuse = %t`, on)) }
	}
	e.execSQL(t, `CREATE TABLE refuse_commits (refuse INTEGER NOT NULL)`,
		`INSERT INTO refuse_commits VALUES (0)`,
		`CREATE TRIGGER refuse_group_commits BEFORE UPDATE ON alk_group_partitions
			WHEN NEW.owner IS NOT NULL AND NEW.committed_offset > OLD.committed_offset AND (SELECT refuse FROM refuse_commits) = 1
			BEGIN SELECT RAISE(ABORT, 'the test refuses group commits'); END`)
	return func(on bool) {
		v := 0
		if on {
			v = 1
		}
		e.execSQL(t, fmt.Sprintf(`UPDATE refuse_commits SET refuse = %d`, v))
	}
}

// TestGroupConsumeCommitFailureIsNotAHandlerFailure: Consume's handler
// finishes e1, and the commit of e1's offset (the lazy flush with
// CommitInterval, or the commit after each event without it) fails: the
// database refuses it (a trigger). The member logs that the commit failed
// and goes on: the handler does not run again for e1, which succeeded; e2
// comes next, and its commit (allowed again) commits the partition through
// e2. Before, Consume logged "group handler failed; retrying the event"
// and handed e1 to the handler again (e1, e1, e2), both engines, both
// forms.
func TestGroupConsumeCommitFailureIsNotAHandlerFailure(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		refuse := refuseGroupCommits(t, e)
		for _, interval := range []time.Duration{time.Hour, 0} {
			warned := newWarnings()
			s := e.open(t, store.WithLogger(slog.New(warned)))
			st := s.Stream(fmt.Sprintf("flush-%d", interval))
			g := st.Group("g")
			e1 := publishBatch(t, st, "k")[0]
			refuse(true)
			rc, cancel := context.WithCancel(c)
			defer cancel()
			handled := make(chan int64, 100)
			done := make(chan error, 1)
			go func() {
				done <- g.Consume(rc, store.GroupOpts{Partitions: 1, LeaseTTL: time.Hour, SafetyPoll: time.Hour,
					RetryDelay: time.Millisecond, CommitInterval: interval}, func(_ context.Context, ev store.Event) error {
					handled <- ev.Offset
					return nil
				})
			}()
			require.Equal(t, e1, <-handled)
			<-warned.first // the failed commit's
			w := warned.all()[0]
			t.Logf("%s, CommitInterval %s: %s", e.name, interval, w)
			assert.Contains(t, w, "could not commit", "the log says what failed: the commit")
			assert.Contains(t, w, "the test refuses group commits")
			refuse(false)
			e2 := publishBatch(t, st, "k")[0]
			var seen []int64
			for off := range handled {
				seen = append(seen, off)
				if off == e2 {
					break
				}
			}
			assert.Equal(t, []int64{e2}, seen, "%s, CommitInterval %s: after e1 (%d), whose commit failed, the handler saw", e.name, interval, e1)
			cancel()
			require.NoError(t, <-done)
			gs, err := g.Stats(c)
			require.NoError(t, err)
			assert.Equal(t, e2, gs.Assignment[0].Committed, "%s, CommitInterval %s: committed through e2", e.name, interval)
			for _, w := range warned.all() {
				assert.NotContains(t, w, "handler failed", "%s, CommitInterval %s", e.name, interval)
			}
		}
	})
}
