package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/internal/syncbuf"
	"github.com/alkstore/alkstore/internal/testbin"
	"github.com/alkstore/alkstore/schema"
	"github.com/alkstore/alkstore/store"
)

// The CLI tests run the built binary, as an operator would, on both
// engines. TestMain builds it once, before any test and outside every
// test's deadline, into bin/alkstore-tests, the binary the tests package
// runs too (internal/testbin: the two packages' builds take turns, and
// the later links nothing).

var (
	binary   string
	pgServer *pgtest.Server // nil when ALK_ENGINES leaves out pg
	engines  []string       // the engines ALK_ENGINES selects; both by default
)

func TestMain(m *testing.M) {
	var err error
	if binary, err = testbin.Alkstore(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if engines, err = pgtest.Engines(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if slices.Contains(engines, "pg") {
		if pgServer, err = pgtest.StartForTests(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if pgServer != nil {
		pgServer.Stop()
	}
	os.Exit(code)
}

// eachEngine runs body on a fresh database of each engine ALK_ENGINES
// selects (both by default).
func eachEngine(t *testing.T, body func(t *testing.T, dsn string)) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			dsn := filepath.Join(t.TempDir(), "alk.db")
			if engine == "pg" {
				var err error
				dsn, err = pgServer.NewDatabase(context.Background())
				require.NoError(t, err)
			}
			body(t, dsn)
		})
	}
}

type result struct {
	out, err string
	code     int
}

// cli runs the binary with ALKSTORE_DSN set to dsn.
func cli(t *testing.T, dsn string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "ALKSTORE_DSN="+dsn, "DATABASE_URL=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{out.String(), errb.String(), code}
}

func ok(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	r := cli(t, dsn, args...)
	require.Equal(t, 0, r.code, "alkstore %v: %s", args, r.err)
	return r.out
}

// jsonLines decodes one JSON object per line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "line %q", line)
		rows = append(rows, m)
	}
	return rows
}

func open(t *testing.T, dsn string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestCLIMigrate: status lists every migration pending on a new database
// and applied after migrate up. A new SQLite database is an empty file, as
// a new PostgreSQL one exists empty: on no file at all status fails and
// creates none (tests/TestCLIMigrateStatusOnAMissingDatabase).
func TestCLIMigrate(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		if !strings.HasPrefix(dsn, "postgres") {
			require.NoError(t, os.WriteFile(dsn, nil, 0o644))
		}
		before := jsonLines(t, ok(t, dsn, "migrate", "status", "--json"))
		require.NotEmpty(t, before)
		for _, m := range before {
			assert.Equal(t, false, m["applied"], "%v", m)
		}
		out := ok(t, dsn, "migrate", "up")
		assert.Contains(t, out, "00001_system_v1.sql")
		assert.NotContains(t, out, "pending")
		after := jsonLines(t, ok(t, dsn, "migrate", "status", "--json"))
		require.Len(t, after, len(before))
		for _, m := range after {
			assert.Equal(t, true, m["applied"], "%v", m)
		}
	})
}

// TestCLIQueues: list (table and JSON, idle queues too), jobs by state, a
// job with its attempt errors, enqueue, cancel, delete, requeue one and
// all dead, pause and resume, and the exit codes.
func TestCLIQueues(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		id := strings.TrimSpace(ok(t, dsn, "queues", "enqueue", "emails", `{"to":"ann"}`, "--priority", "3"))
		ok(t, dsn, "queues", "enqueue", "emails", "later", "--delay", "1h")
		s := open(t, dsn)
		ctx := context.Background()
		q := s.Queue("emails")
		_, err := s.Queue("idle").Claim(ctx, "w", 1, time.Minute) // a worker polls an empty queue
		require.NoError(t, err)

		table := ok(t, dsn, "queues", "list")
		lines := strings.Split(strings.TrimSpace(table), "\n")
		require.Len(t, lines, 3, table)
		assert.Regexp(t, `^QUEUE\s+PAUSED\s+READY\s+SCHEDULED\s+RUNNING\s+DEAD`, lines[0])
		assert.Regexp(t, `^emails\s+-\s+1\s+1\s+0\s+0\s`, lines[1])
		assert.Regexp(t, `^idle\s+-\s+0\s+0\s+0\s+0\s`, lines[2])
		// Columns line up: every row's READY starts where the header's does.
		col := strings.Index(lines[0], "READY")
		for _, l := range lines[1:] {
			assert.NotEqual(t, ' ', l[col], "READY column aligned in %q", l)
			assert.Equal(t, byte(' '), l[col-1])
		}
		rows := jsonLines(t, ok(t, dsn, "queues", "list", "--json"))
		require.Len(t, rows, 2)
		assert.Equal(t, "emails", rows[0]["name"])
		assert.EqualValues(t, 1, rows[0]["ready"])
		assert.EqualValues(t, 1, rows[0]["scheduled"])

		// A job that failed twice, with its attempt errors.
		jobs, err := q.Claim(ctx, "w", 1, time.Minute)
		require.NoError(t, err)
		_, err = jobs[0].Retry(ctx, 0, "smtp down")
		require.NoError(t, err)
		jobs, err = q.Claim(ctx, "w", 1, time.Minute)
		require.NoError(t, err)
		require.NoError(t, jobs[0].Fail(ctx, "bad address"))

		job := jsonLines(t, ok(t, dsn, "queues", "job", id, "--json"))[0]
		assert.Equal(t, "dead", job["state"])
		assert.Equal(t, `{"to":"ann"}`, job["payload"])
		assert.EqualValues(t, 3, job["priority"])
		errs := job["errors"].([]any)
		require.Len(t, errs, 2)
		assert.Equal(t, "smtp down", errs[0].(map[string]any)["error"])
		human := ok(t, dsn, "queues", "job", id)
		assert.Contains(t, human, "ATTEMPT ERRORS")
		assert.Contains(t, human, "bad address")

		dead := jsonLines(t, ok(t, dsn, "queues", "jobs", "emails", "--state", "dead", "--json"))
		require.Len(t, dead, 1)
		assert.Equal(t, job["id"], dead[0]["id"])
		assert.Contains(t, ok(t, dsn, "queues", "jobs", "emails", "--state", "dead"), "bad address")

		ok(t, dsn, "queues", "requeue", "emails", id)
		j, err := s.Job(ctx, int64(dead[0]["id"].(float64)))
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)

		// Requeue every dead job, with a progress bar on stderr.
		for range 3 {
			_, err := q.Enqueue(ctx, nil, store.EnqueueOpts{MaxAttempts: 1})
			require.NoError(t, err)
		}
		claimed, err := q.Claim(ctx, "w", 10, time.Minute)
		require.NoError(t, err)
		for _, c := range claimed {
			require.NoError(t, c.Fail(ctx, "x"))
		}
		r := cli(t, dsn, "queues", "requeue", "emails", "--all-dead")
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.err, fmt.Sprintf("requeued %d dead jobs", len(claimed)))
		assert.Contains(t, r.err, "#")
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		assert.Zero(t, st.Dead)

		cancelID := strings.TrimSpace(ok(t, dsn, "queues", "enqueue", "emails"))
		ok(t, dsn, "queues", "cancel", "emails", cancelID)
		ok(t, dsn, "queues", "delete", "emails", cancelID)
		assert.Equal(t, exitNotFound, cli(t, dsn, "queues", "job", cancelID).code)

		ok(t, dsn, "queues", "pause", "emails")
		st, err = q.Stats(ctx)
		require.NoError(t, err)
		assert.True(t, st.Paused)
		assert.Contains(t, ok(t, dsn, "queues", "list"), "paused")
		ok(t, dsn, "queues", "resume", "emails")
		st, err = q.Stats(ctx)
		require.NoError(t, err)
		assert.False(t, st.Paused)

		// Exit codes.
		assert.Equal(t, exitNotFound, cli(t, dsn, "queues", "job", "999999").code)
		assert.Equal(t, exitBadInput, cli(t, dsn, "queues", "job", "abc").code)
		assert.Equal(t, exitBadInput, cli(t, dsn, "queues", "jobs", "emails", "--state", "bogus").code)
		// As tail and heads: 0 was read as the default page and lost its
		// next-page hint (attack57).
		assert.Equal(t, exitBadInput, cli(t, dsn, "queues", "jobs", "emails", "--limit", "0").code)
		assert.Equal(t, exitBadInput, cli(t, dsn, "queues", "enqueue", "__alk_x").code)
		assert.Equal(t, exitBadInput, cli(t, dsn, "no-such-command").code)
		assert.Equal(t, exitBadInput, cli(t, "", "stats").code)
	})
}

// TestCLIOutbox: an outbox's messages are paged and requeued by the name
// queues list shows (--outbox), apart from a plain queue of the same name;
// the backing queue's name is refused with the spelling that works and no
// success line; a message without its own limit shows no 2^30 (attack58
// F4: only queues job ID reached a dead message).
func TestCLIOutbox(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		s := open(t, dsn)
		ctx := context.Background()
		ob := s.Outbox("webhooks")
		msg := killOutboxMessage(t, ob)
		q := s.Queue("webhooks") // a plain queue of the same name, with a dead job
		_, err := q.Enqueue(ctx, []byte("plain"), store.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		jobs, err := q.Claim(ctx, "w", 1, time.Minute)
		require.NoError(t, err)
		require.NoError(t, jobs[0].Fail(ctx, "x"))
		plain := jobs[0].ID

		assert.Regexp(t, `(?m)^outbox webhooks\s+-\s+0\s+0\s+0\s+1\s`, ok(t, dsn, "queues", "list"))
		one := ok(t, dsn, "queues", "job", fmt.Sprint(msg))
		assert.Regexp(t, `(?m)^queue\s+outbox webhooks$`, one)
		assert.Regexp(t, `(?m)^attempts\s+1 \(the limit is the outbox deliverer's MaxAttempts`, one)
		assert.NotContains(t, one, "1073741824")

		// The backing queue's name: refused, pointing at --outbox, and no
		// success line (requeue printed "requeued 0 dead jobs" with the error).
		for _, args := range [][]string{
			{"queues", "jobs", "__alk_outbox:webhooks", "--state", "dead"},
			{"queues", "requeue", "__alk_outbox:webhooks", "--all-dead"},
			{"queues", "requeue", "__alk_outbox:webhooks", "--all-dead", "--json"},
			{"queues", "requeue", "__alk_outbox:webhooks", fmt.Sprint(msg)},
		} {
			r := cli(t, dsn, args...)
			assert.Equal(t, exitBadInput, r.code, "%v", args)
			assert.Contains(t, r.err, "--outbox webhooks", "%v", args)
			assert.NotContains(t, r.err, "requeued", "%v", args)
			assert.Empty(t, r.out, "%v", args)
		}
		assert.Equal(t, exitBadInput, cli(t, dsn, "queues", "jobs", "--outbox", "__alk_outbox:webhooks").code)

		ids := func(args ...string) []int64 {
			var out []int64
			for _, row := range jsonLines(t, ok(t, dsn, append(args, "--json")...)) {
				out = append(out, int64(row["id"].(float64)))
			}
			return out
		}
		assert.Equal(t, []int64{msg}, ids("queues", "jobs", "--outbox", "webhooks", "--state", "dead"))
		assert.Equal(t, []int64{plain}, ids("queues", "jobs", "webhooks", "--state", "dead"))
		page := ok(t, dsn, "queues", "jobs", "webhooks", "--outbox", "--state", "dead")
		assert.Regexp(t, fmt.Sprintf(`(?m)^%d\s+dead\s+1/-\s`, msg), page)
		assert.NotContains(t, page, "1073741824")

		// --json keeps the stored 2^30 (docs/cli-json.md) and says what it
		// stands for, as the text's "-" does; a job with a limit of its
		// own has no such field.
		for _, args := range [][]string{
			{"queues", "job", fmt.Sprint(msg), "--json"},
			{"queues", "jobs", "webhooks", "--outbox", "--state", "dead", "--json"},
		} {
			rows := jsonLines(t, ok(t, dsn, args...))
			require.Len(t, rows, 1, "%v", args)
			assert.EqualValues(t, 1<<30, rows[0]["max_attempts"], "%v", args)
			assert.Equal(t, true, rows[0]["max_attempts_by_deliverer"], "%v", args)
		}
		plainRows := jsonLines(t, ok(t, dsn, "queues", "job", fmt.Sprint(plain), "--json"))
		require.Len(t, plainRows, 1)
		assert.EqualValues(t, 1, plainRows[0]["max_attempts"])
		assert.NotContains(t, plainRows[0], "max_attempts_by_deliverer")

		// The plain queue's requeue leaves the outbox alone, and once empty
		// says where the dead messages are.
		r := cli(t, dsn, "queues", "requeue", "webhooks", "--all-dead")
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.err, "requeued 1 dead jobs of webhooks")
		r = cli(t, dsn, "queues", "requeue", "webhooks", "--all-dead")
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.err, "requeued 0 dead jobs of webhooks")
		assert.Contains(t, r.err, "outbox webhooks has 1 dead: add --outbox")
		r = cli(t, dsn, "queues", "jobs", "webhooks", "--state", "dead")
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.err, "outbox webhooks has 1 dead: add --outbox")

		rows := jsonLines(t, ok(t, dsn, "queues", "requeue", "--outbox", "webhooks", "--all-dead", "--json"))
		assert.Equal(t, []map[string]any{{"requeued": float64(1)}}, rows)
		j, err := ob.Job(ctx, msg)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)

		// One message by id.
		msg = killOutboxMessage(t, ob)
		assert.Equal(t, exitNotFound, cli(t, dsn, "queues", "requeue", "webhooks", fmt.Sprint(msg)).code)
		r = cli(t, dsn, "queues", "requeue", "--outbox", "webhooks", fmt.Sprint(msg))
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.err, fmt.Sprintf("job %d: requeued", msg))
		j, err = ob.Job(ctx, msg)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
	})
}

// TestCLICancelAndDeleteRefuseAnOutboxMessage: the store has no cancel or
// delete for an outbox's messages, so queues cancel and queues delete
// refuse one however it is named (--outbox, the backing queue's name, or
// a message's id under the outbox's name), exit 2, saying so and pointing
// at what works, and touch nothing. Before, --outbox was an unknown flag,
// the backing name a reserved name, and a message's id "not found".
func TestCLICancelAndDeleteRefuseAnOutboxMessage(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		s := open(t, dsn)
		ctx := context.Background()
		ob := s.Outbox("webhooks")
		dead := killOutboxMessage(t, ob)
		pending, err := ob.Enqueue(ctx, []byte("hook"), store.EnqueueOpts{})
		require.NoError(t, err)
		for _, verb := range []string{"cancel", "delete"} {
			for _, id := range []int64{dead, pending} {
				for _, args := range [][]string{
					{"queues", verb, "--outbox", "webhooks", fmt.Sprint(id)},
					{"queues", verb, "webhooks", "--outbox", fmt.Sprint(id), "--json"},
					{"queues", verb, "__alk_outbox:webhooks", fmt.Sprint(id)},
					{"queues", verb, "webhooks", fmt.Sprint(id)},
				} {
					r := cli(t, dsn, args...)
					assert.Equal(t, exitBadInput, r.code, "%v", args)
					assert.Contains(t, r.err, fmt.Sprintf("an outbox's messages cannot be %s", pastTense(verb)), "%v", args)
					assert.Contains(t, r.err, "queues requeue --outbox webhooks ID", "%v", args)
					assert.Empty(t, r.out, "%v", args)
					if len(args) == 4 && args[2] == "webhooks" {
						assert.Contains(t, r.err, fmt.Sprintf("job %d is a message of outbox webhooks, not a job of queue webhooks", id), "%v", args)
					}
				}
			}
		}
		for id, state := range map[int64]store.JobState{dead: store.JobDead, pending: store.JobPending} {
			j, err := ob.Job(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, state, j.State, "message %d untouched", id)
		}
		// A plain queue's job of that name is still cancelled and deleted.
		id, err := s.Queue("webhooks").Enqueue(ctx, []byte("plain"), store.EnqueueOpts{})
		require.NoError(t, err)
		r := cli(t, dsn, "queues", "cancel", "webhooks", fmt.Sprint(id))
		require.Equal(t, 0, r.code, r.err)
		r = cli(t, dsn, "queues", "delete", "webhooks", fmt.Sprint(id))
		require.Equal(t, 0, r.code, r.err)
		assert.Equal(t, exitNotFound, cli(t, dsn, "queues", "delete", "webhooks", fmt.Sprint(id)).code, "gone: not found, not an outbox's")
	})
}

// killOutboxMessage sends a new message of ob to dead through a deliverer
// that refuses it for good, and returns its id. Any message pending before
// it is refused too.
func killOutboxMessage(t *testing.T, ob *store.Outbox) int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, err := ob.Enqueue(ctx, []byte("hook"), store.EnqueueOpts{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- ob.Run(ctx, store.OutboxOpts{}, func(context.Context, *store.Job) error {
			return store.Permanent(errors.New("gone"))
		})
	}()
	require.Eventually(t, func() bool {
		j, err := ob.Job(context.Background(), id)
		return err == nil && j.State == store.JobDead
	}, time.Minute, 10*time.Millisecond)
	cancel()
	<-done
	return id
}

// TestCLIResetKnowsEveryStream: `streams reset` refuses a stream of which
// nothing is stored (exit 3, a typo: attack59 F1), but counts a stream
// known by a consumer group alone, trimmed empty (review59b F1: exit 3
// before), and `--new` places a consumer of a stream nothing was published
// to yet (the library's ResetOffset accepts it; `--new` was no flag before).
func TestCLIResetKnowsEveryStream(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		s := open(t, dsn)
		ctx := context.Background()
		gs := s.Stream("payments")
		var last int64
		for range 3 {
			var err error
			last, err = gs.Publish(ctx, []byte("p"))
			require.NoError(t, err)
		}
		m, err := gs.Group("g").Join(ctx, store.GroupOpts{Partitions: 1})
		require.NoError(t, err)
		for range 3 {
			ev, err := m.Recv(ctx)
			require.NoError(t, err)
			require.NoError(t, m.Commit(ctx, ev))
		}
		require.NoError(t, m.Leave(ctx))
		_, err = gs.TrimTo(ctx, last)
		require.NoError(t, err)
		ok(t, dsn, "streams", "reset", "payments", "audit", fmt.Sprint(last))
		off, err := gs.Offset(ctx, "audit")
		require.NoError(t, err)
		assert.Equal(t, last, off)

		typo := cli(t, dsn, "streams", "reset", "payments-typo", "audit", "0")
		assert.Equal(t, exitNotFound, typo.code)
		assert.Contains(t, typo.err, "--new")
		exists, err := s.Stream("payments-typo").Exists(ctx)
		require.NoError(t, err)
		assert.False(t, exists, "no consumer made for it")
		ok(t, dsn, "streams", "reset", "invoices", "billing", "0", "--new")
		exists, err = s.Stream("invoices").Exists(ctx)
		require.NoError(t, err)
		assert.True(t, exists, "its consumer placed before the first publish")
		assert.Equal(t, exitBadInput, cli(t, dsn, "streams", "reset", "invoices2", "billing", fmt.Sprint(last+1), "--new").code, "still bounded")
		assert.Contains(t, ok(t, dsn, "streams", "reset", "--help"), "--new")
	})
}

// TestCLIStreams: list, publish (keyed and not), tail from an offset and
// from a consumer, consumers with lag, reset, heads.
func TestCLIStreams(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		var offs []string
		for i := range 3 {
			offs = append(offs, strings.TrimSpace(ok(t, dsn, "streams", "publish", "orders", fmt.Sprintf(`{"n":%d}`, i))))
		}
		ok(t, dsn, "streams", "publish", "users", "--key", "ann", "v1")
		ok(t, dsn, "streams", "publish", "users", "--key", "ann", "v2")
		s := open(t, dsn)
		ctx := context.Background()
		require.NoError(t, s.Stream("orders").SaveOffset(ctx, "billing", mustInt(t, offs[0])))

		list := jsonLines(t, ok(t, dsn, "streams", "list", "--json"))
		require.Len(t, list, 2)
		assert.Equal(t, "orders", list[0]["name"])
		assert.EqualValues(t, 3, list[0]["events"])
		assert.Regexp(t, `(?m)^orders\s+\d+\s+3\s+1\s+2\s`, ok(t, dsn, "streams", "list"))

		evs := jsonLines(t, ok(t, dsn, "streams", "tail", "orders", "--from", offs[0], "--json"))
		require.Len(t, evs, 2)
		assert.Equal(t, `{"n":1}`, evs[0]["payload"])
		evs = jsonLines(t, ok(t, dsn, "streams", "tail", "orders", "--consumer", "billing", "--json"))
		require.Len(t, evs, 2, "from the consumer's position")
		assert.Empty(t, jsonLines(t, ok(t, dsn, "streams", "tail", "orders", "--end", "--json")))

		cons := jsonLines(t, ok(t, dsn, "streams", "consumers", "orders", "--json"))
		require.Len(t, cons, 1)
		assert.Equal(t, "billing", cons[0]["consumer"])
		assert.EqualValues(t, 2, cons[0]["lag"])
		ok(t, dsn, "streams", "reset", "orders", "billing", "0")
		off, err := s.Stream("orders").Offset(ctx, "billing")
		require.NoError(t, err)
		assert.Zero(t, off)
		assert.Equal(t, exitNotFound, cli(t, dsn, "streams", "consumers", "nope").code)
		assert.Equal(t, exitBadInput, cli(t, dsn, "streams", "reset", "orders", "billing", "-1").code)
		// Past the newest offset (an operator's extra 0): refused, or the
		// consumer skipped the stream's next events; a mistyped stream:
		// not found, and no consumer made for it (attack59 F1).
		past := cli(t, dsn, "streams", "reset", "orders", "billing", fmt.Sprint(mustInt(t, offs[2])*10+100))
		assert.Equal(t, exitBadInput, past.code)
		assert.Contains(t, past.err, `consumer "billing"`)
		typo := cli(t, dsn, "streams", "reset", "orders-typo", "billing", "0")
		assert.Equal(t, exitNotFound, typo.code)
		assert.Contains(t, typo.err, `"orders-typo"`)
		assert.Equal(t, exitNotFound, cli(t, dsn, "streams", "consumers", "orders-typo").code, "no consumer made for it")
		off, err = s.Stream("orders").Offset(ctx, "billing")
		require.NoError(t, err)
		assert.Zero(t, off, "the refused resets changed nothing")

		heads := jsonLines(t, ok(t, dsn, "streams", "heads", "users", "--json"))
		require.Len(t, heads, 1)
		assert.Equal(t, "ann", heads[0]["key"])
		assert.Equal(t, "v2", heads[0]["payload"])
		assert.Regexp(t, `(?m)^ann\s+\d+\s+0\s+.*v2$`, ok(t, dsn, "streams", "heads", "users"))
	})
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	_, err := fmt.Sscan(s, &n)
	require.NoError(t, err)
	return n
}

// TestCLISchedules: list with next fire, trigger, pause, resume, delete.
func TestCLISchedules(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		s := open(t, dsn)
		ctx := context.Background()
		require.NoError(t, s.Schedule("nightly").Set(ctx, store.ScheduleSpec{Spec: "@daily", Queue: "reports", Payload: []byte("r")}))
		rows := jsonLines(t, ok(t, dsn, "schedules", "list", "--json"))
		require.Len(t, rows, 1)
		assert.Equal(t, "nightly", rows[0]["name"])
		assert.Equal(t, "reports", rows[0]["queue"])
		assert.NotEmpty(t, rows[0]["next_fire_at"])
		assert.Regexp(t, `(?m)^nightly\s+@daily\s+UTC\s+reports\s+active\s+in \d+[hm]`, ok(t, dsn, "schedules", "list"))

		id := mustInt(t, ok(t, dsn, "schedules", "trigger", "nightly"))
		j, err := s.Queue("reports").Job(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, []byte("r"), j.Payload)

		ok(t, dsn, "schedules", "pause", "nightly")
		info, err := s.Schedule("nightly").Info(ctx)
		require.NoError(t, err)
		assert.True(t, info.Paused)
		ok(t, dsn, "schedules", "resume", "nightly")
		ok(t, dsn, "schedules", "delete", "nightly")
		assert.Equal(t, exitNotFound, cli(t, dsn, "schedules", "pause", "nightly").code)
		assert.Equal(t, exitNotFound, cli(t, dsn, "schedules", "trigger", "nightly").code)
	})
}

// TestCLITailFollow: tail --follow prints an event published after it
// started, one JSON object per line, and exits 0 on SIGINT.
// TestCLIGroups: groups list shows a group's members, free partitions and
// lag, and --json its assignment.
func TestCLIGroups(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		s := open(t, dsn)
		ctx := context.Background()
		_, err := s.Stream("orders").PublishWithKey(ctx, "k", []byte("v"))
		require.NoError(t, err)
		m, err := s.Stream("orders").Group("billing").Join(ctx, store.GroupOpts{Member: "m", Partitions: 2})
		require.NoError(t, err)
		defer m.Close()
		_, err = m.Recv(ctx)
		require.NoError(t, err)
		assert.Regexp(t, `(?m)^orders\s+billing\s+2\s+m-\w+\(2\)\s+0\s+1$`, ok(t, dsn, "groups", "list"))
		rows := jsonLines(t, ok(t, dsn, "groups", "list", "--json"))
		require.Len(t, rows, 1)
		assert.Equal(t, "billing", rows[0]["group"])
		assert.EqualValues(t, 1, rows[0]["lag"])
		assert.Len(t, rows[0]["assignment"], 2)
		assert.Len(t, rows[0]["members"], 1)

		// A lag at StatsCountLimit is a lower bound, shown as such, as
		// streams list shows its counts (attack56b F6: "10000" for 25,000).
		msgs := make([]store.Message, store.StatsCountLimit+5)
		for i := range msgs {
			k := fmt.Sprint("k", i)
			msgs[i] = store.Message{Key: &k, Payload: []byte("v")}
		}
		_, err = s.Stream("big").PublishMany(ctx, msgs)
		require.NoError(t, err)
		b, err := s.Stream("big").Group("g").Join(ctx, store.GroupOpts{Member: "m", Partitions: 2})
		require.NoError(t, err)
		defer b.Close()
		_, err = b.Recv(ctx)
		require.NoError(t, err)
		assert.Regexp(t, fmt.Sprintf(`(?m)^big\s+g\s+2\s+m-\w+\(2\)\s+0\s+%d\+$`, store.StatsCountLimit), ok(t, dsn, "groups", "list"))
	})
}

func TestCLITailFollow(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		head := strings.TrimSpace(ok(t, dsn, "streams", "publish", "orders", "old"))
		cmd, lines, stderr := startFollow(t, dsn, "streams", "tail", "orders", "--from", head, "--follow", "--json")
		off := strings.TrimSpace(ok(t, dsn, "streams", "publish", "orders", "new"))
		requireFollowed(t, lines, stderr, "new", off)

		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "exit after SIGINT; stderr: %s", stderr.String())
		case <-time.After(30 * time.Second):
			t.Fatal("tail --follow did not exit on SIGINT")
		}

		// A stream nothing was written to yet is followed from its first
		// event: a consumer started before its producer (attackfix60
		// made it "not found", as tail without --follow is).
		_, lines, stderr = startFollow(t, dsn, "streams", "tail", "fresh", "--follow", "--json")
		require.Eventually(t, func() bool {
			return strings.Contains(stderr.String(), `stream "fresh" has no events yet; waiting for its first`)
		}, 30*time.Second, time.Millisecond, "stderr: %s", stderr)
		off = strings.TrimSpace(ok(t, dsn, "streams", "publish", "fresh", "first"))
		requireFollowed(t, lines, stderr, "first", off)
	})
}

// startFollow starts the CLI with args (a tail --follow, killed when t
// ends) and returns its stdout's lines and its stderr.
func startFollow(t *testing.T, dsn string, args ...string) (*exec.Cmd, <-chan string, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "ALKSTORE_DSN="+dsn)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines, stderr
}

// requireFollowed: the next line a tail --follow --json printed is the
// event at offset off with payload.
func requireFollowed(t *testing.T, lines <-chan string, stderr *syncBuffer, payload, off string) {
	t.Helper()
	select {
	case line, open := <-lines:
		require.True(t, open, "tail --follow ended; stderr: %s", stderr.String())
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		assert.Equal(t, payload, ev["payload"])
		assert.EqualValues(t, mustInt(t, off), ev["offset"])
	case <-time.After(30 * time.Second):
		t.Fatalf("tail --follow printed nothing for an event published after it started; stderr: %s", stderr.String())
	}
}

// syncBuffer is a bytes.Buffer a subprocess's stderr copier writes while
// the test reads it.
type syncBuffer = syncbuf.Buffer

// TestCLINeverEchoesThePassword: a failed connection's error names
// neither the DSN's password nor the DSN.
func TestCLINeverEchoesThePassword(t *testing.T) {
	r := cli(t, "postgres://op:s3cr3t-pw@127.0.0.1:1/alk?connect_timeout=2", "stats")
	assert.Equal(t, exitFailure, r.code)
	assert.NotContains(t, r.err+r.out, "s3cr3t-pw")
	assert.NotEmpty(t, r.err)
}

// TestCLIListen: listen prints a notification sent after it started (one
// JSON object per line) and exits 0 on SIGINT.
func TestCLIListen(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		cmd := exec.Command(binary, "listen", "alerts", "--json")
		cmd.Env = append(os.Environ(), "ALKSTORE_DSN="+dsn)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// A notification sent before the listener attached is not delivered
		// (notifications have no history): send until one arrives.
		deadline := time.After(30 * time.Second)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for got := false; !got; {
			select {
			case line := <-lines:
				var n map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &n), line)
				assert.Equal(t, "alerts", n["channel"])
				assert.Equal(t, "disk full", n["payload"])
				got = true
			case <-tick.C:
				ok(t, dsn, "notify", "alerts", "disk full")
			case <-deadline:
				t.Fatalf("listen printed nothing; stderr: %s", stderr.String())
			}
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "exit after SIGINT; stderr: %s", stderr.String())
		case <-time.After(30 * time.Second):
			t.Fatal("listen did not exit on SIGINT")
		}
	})
}

// TestCLIUIRefusesAnOpenAddressWithoutCredentials: ui binds loopback by
// default and refuses any other address unless given a token or basic-auth
// credentials.
func TestCLIUIRefusesAnOpenAddressWithoutCredentials(t *testing.T) {
	r := cli(t, filepath.Join(t.TempDir(), "a.db"), "ui", "--addr", "0.0.0.0:0")
	assert.Equal(t, exitBadInput, r.code)
	assert.Contains(t, r.err, "refusing")
	r = cli(t, filepath.Join(t.TempDir(), "a.db"), "ui", "--addr", "0.0.0.0:0", "--user", "admin")
	assert.Equal(t, exitBadInput, r.code, "a user without ALKSTORE_UI_PASSWORD")
	assert.True(t, isLoopback("127.0.0.1") && isLoopback("::1") && isLoopback("localhost") && !isLoopback("0.0.0.0") && !isLoopback(""))
}

// TestUIGuard: the token (header, cookie, or once in the query, which
// sets the cookie and leaves the address bar) and basic auth let a request
// through; nothing else does.
func TestUIGuard(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := guard(inner, "tok-123", "admin", "pw")
	do := func(mod func(r *http.Request)) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		mod(r)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	assert.Equal(t, http.StatusUnauthorized, do(func(*http.Request) {}).Code)
	assert.Equal(t, http.StatusTeapot, do(func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-123") }).Code)
	assert.Equal(t, http.StatusUnauthorized, do(func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }).Code)
	assert.Equal(t, http.StatusTeapot, do(func(r *http.Request) { r.SetBasicAuth("admin", "pw") }).Code)
	assert.Equal(t, http.StatusUnauthorized, do(func(r *http.Request) { r.SetBasicAuth("admin", "no") }).Code)
	w := do(func(r *http.Request) { r.URL.RawQuery = "token=tok-123" })
	assert.Equal(t, http.StatusSeeOther, w.Code)
	assert.Equal(t, "/", w.Header().Get("Location"), "the token leaves the address bar")
	cookies := w.Result().Cookies()
	require.Len(t, cookies, 1)
	assert.Equal(t, http.StatusTeapot, do(func(r *http.Request) { r.AddCookie(cookies[0]) }).Code)
}

// TestCLIRefusesAMissingSQLiteFile: every command but migrate up, given a
// path where no SQLite database is (a typo), exits 1 naming the path and
// alkstore migrate up, and creates no file: SQLite creates a missing one
// on open, and migrate status then listed the empty file as a database
// with every migration pending instead of saying there is none.
func TestCLIRefusesAMissingSQLiteFile(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.db")
	for _, args := range [][]string{
		{"stats"}, {"queues", "list"}, {"queues", "jobs", "q"}, {"queues", "job", "1"}, {"queues", "enqueue", "q", "x"},
		{"queues", "cancel", "q", "1"}, {"queues", "delete", "q", "1"}, {"queues", "pause", "q"}, {"queues", "resume", "q"},
		{"queues", "requeue", "q", "--all-dead"}, {"streams", "list"}, {"streams", "tail", "s"}, {"streams", "consumers", "s"},
		{"streams", "heads", "s"}, {"streams", "publish", "s", "x"}, {"streams", "reset", "s", "c", "0"},
		{"schedules", "list"}, {"schedules", "pause", "x"}, {"schedules", "resume", "x"}, {"schedules", "delete", "x"},
		{"schedules", "trigger", "x"}, {"groups", "list"}, {"notify", "ch", "x"}, {"listen", "ch"}, {"ui", "--addr", "127.0.0.1:0"},
		{"migrate", "status"},
	} {
		r := cli(t, typo, args...)
		assert.Equal(t, 1, r.code, "alkstore %v: %s", args, r.err)
		assert.Contains(t, r.err, `no SQLite database at "`+typo+`" (alkstore migrate up creates it)`, "alkstore %v", args)
		_, err := os.Stat(typo)
		require.ErrorIs(t, err, os.ErrNotExist, "alkstore %v created the file", args)
	}
	ok(t, typo, "migrate", "up")
	_, err := os.Stat(typo)
	assert.NoError(t, err, "migrate up creates it")
}

// TestCLISchemaBehindPointsToMigrateUp: a read command on a database
// without alkstore's schema tells the operator to run alkstore migrate up,
// not the goose command line or auto-migration meant for applications.
func TestCLISchemaBehindPointsToMigrateUp(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		if !strings.HasPrefix(dsn, "postgres") {
			require.NoError(t, os.WriteFile(dsn, nil, 0o644))
		}
		for _, args := range [][]string{{"queues", "list"}, {"stats"}, {"streams", "tail", "s"}} {
			r := cli(t, dsn, args...)
			assert.Equal(t, 1, r.code, "alkstore %v: %s", args, r.err)
			assert.Contains(t, r.err, "schema version mismatch", "alkstore %v", args)
			assert.Contains(t, r.err, "run alkstore migrate up", "alkstore %v", args)
			assert.NotContains(t, r.err, "goose -table", "alkstore %v", args)
			assert.NotContains(t, r.err, "auto-migration", "alkstore %v", args)
		}
	})
}

// TestCLISchemaOlderPointsToMigrateUp: a read command on a database whose
// schema is at an older version than this binary's says so and tells the
// operator to run alkstore migrate up.
func TestCLISchemaOlderPointsToMigrateUp(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		require.NoError(t, open(t, dsn).Close())
		db, table := versionTable(t, dsn)
		want := newestVersion(t, db, table)
		_, err := db.Exec(fmt.Sprintf("DELETE FROM %s WHERE version_id = %d", table, want))
		require.NoError(t, err)
		have := newestVersion(t, db, table)
		r := cli(t, dsn, "queues", "list")
		assert.Equal(t, exitFailure, r.code, r.err)
		assert.Contains(t, r.err, fmt.Sprintf("schema version mismatch: the database is at version %d, older than this alkstore binary (%d): run alkstore migrate up", have, want))
		assert.NotContains(t, r.err, "goose -table")
		assert.NotContains(t, r.err, "upgrade")
	})
}

// versionTable is alkstore's goose version table on dsn's engine, and a
// writable handle on the database (closed when t ends).
func versionTable(t *testing.T, dsn string) (*sql.DB, string) {
	t.Helper()
	open, table := litedriver.Open, schema.SQLiteVersionTable
	if strings.HasPrefix(dsn, "postgres") {
		open = func(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }
		table = schema.PostgresVersionTable
	}
	db, err := open(dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db, table
}

// newestVersion is the highest version dsn's version table records.
func newestVersion(t *testing.T, db *sql.DB, table string) int64 {
	t.Helper()
	var v int64
	require.NoError(t, db.QueryRow("SELECT max(version_id) FROM "+table).Scan(&v))
	return v
}

// TestCLIOnANewerSchema: on a database a newer alkstore migrated (a version
// this binary has no file for), migrate status and migrate up list that
// version and say on stderr that the database is newer than this binary
// (exit 0: goose's up says "no migrations to run" on such a database, and
// an older binary's migrate up in a rollback's deploy must not fail while
// the library's auto-migrating Open accepts the schema); every other
// command refuses it saying to upgrade this binary, not to migrate. Both
// said every migration was applied while the other commands failed with
// "schema version mismatch: database is at version 51, this library needs
// 50" (attack59 F3).
func TestCLIOnANewerSchema(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		require.NoError(t, open(t, dsn).Close())
		db, table := versionTable(t, dsn)
		want := newestVersion(t, db, table)
		newer := want + 1
		_, err := db.Exec(fmt.Sprintf("INSERT INTO %s (version_id, is_applied) VALUES (%d, true)", table, newer))
		require.NoError(t, err)
		note := fmt.Sprintf("the database is at version %d, newer than this alkstore binary (%d)", newer, want)

		r := cli(t, dsn, "stats")
		assert.Equal(t, exitFailure, r.code, r.err)
		assert.Contains(t, r.err, "schema version mismatch: "+note+": a newer alkstore migrated it; upgrade this binary")
		assert.NotContains(t, r.err, "migrate up")

		for _, cmd := range []string{"status", "up"} {
			r = cli(t, dsn, "migrate", cmd)
			require.Equal(t, 0, r.code, "migrate %s: %s", cmd, r.err)
			assert.Contains(t, r.err, note+": a newer alkstore migrated it; upgrade this binary", "migrate %s", cmd)
			lines := strings.Split(strings.TrimSpace(r.out), "\n")
			assert.Regexp(t, fmt.Sprintf(`^%d +- +applied \(unknown to this binary\)$`, newer), lines[len(lines)-1], "migrate %s", cmd)
		}

		r = cli(t, dsn, "migrate", "status", "--json")
		require.Equal(t, 0, r.code, r.err)
		assert.Contains(t, r.err, note)
		rows := jsonLines(t, r.out)
		last := rows[len(rows)-1]
		assert.Equal(t, map[string]any{"version": float64(newer), "applied": true, "unknown": true}, last)
		for _, m := range rows[:len(rows)-1] {
			assert.Equal(t, true, m["applied"], "%v", m)
			assert.NotContains(t, m, "unknown")
			assert.NotEmpty(t, m["file"])
		}
	})
}

// TestCLINotFoundSaysWhat: every command given a job, schedule or stream
// that does not exist exits 3 with an error naming it and nothing of the
// driver's: queues job, schedules resume and schedules trigger said
// "not found: sql: no rows in result set" (attack59).
func TestCLINotFoundSaysWhat(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"queues", "job", "999"}, `alkstore: job: job 999: not found`},
			{[]string{"queues", "cancel", "emails", "999"}, `alkstore: cancel "emails": live job 999: not found`},
			{[]string{"queues", "delete", "emails", "999"}, `alkstore: delete "emails": job 999: not found`},
			{[]string{"queues", "requeue", "emails", "999"}, `alkstore: requeue "emails": dead, cancelled or expired job 999: not found`},
			{[]string{"queues", "requeue", "--outbox", "hooks", "999"}, `alkstore: requeue "__alk_outbox:hooks": dead, cancelled or expired job 999: not found`},
			{[]string{"streams", "consumers", "nosuch"}, `alkstore: stream "nosuch": not found`},
			{[]string{"schedules", "pause", "nosuch"}, `alkstore: pause schedule "nosuch": not found`},
			{[]string{"schedules", "resume", "nosuch"}, `alkstore: resume schedule "nosuch": not found`},
			{[]string{"schedules", "delete", "nosuch"}, `alkstore: delete schedule "nosuch": not found`},
			{[]string{"schedules", "trigger", "nosuch"}, `alkstore: trigger schedule "nosuch": not found`},
		} {
			r := cli(t, dsn, c.args...)
			assert.Equal(t, exitNotFound, r.code, "alkstore %v: %s", c.args, r.err)
			assert.Equal(t, c.want, strings.TrimSpace(r.err), "alkstore %v", c.args)
		}
	})
}

// TestCLIReadsOfWhatIsNotThereAreNotFound: streams tail and heads of a
// stream of which nothing is stored (Stream.Exists), tail --consumer of a
// consumer the stream does not have, and queues jobs of a queue or outbox
// of which nothing is stored (no job, no settings row: what queues list
// lists) exit 3 saying what is missing and print nothing, as streams
// consumers does. Before session 60 each exited 0: tail, heads and jobs
// printed nothing, and a mistyped --consumer read as offset 0 printed the
// whole stream (attack60 F4). What is there still reads: a consumer at
// offset 0, a stream known by a consumer alone, a stream without keys, an
// idle queue, an empty state of a queue known by its jobs alone (EnqueueTx
// writes no settings row), an outbox.
func TestCLIReadsOfWhatIsNotThereAreNotFound(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		s := open(t, dsn)
		ctx := context.Background()
		orders := s.Stream("orders")
		var offs []int64
		for range 3 {
			off, err := orders.Publish(ctx, []byte("o"))
			require.NoError(t, err)
			offs = append(offs, off)
		}
		require.NoError(t, orders.SaveOffset(ctx, "billing", offs[0]))
		require.NoError(t, orders.ResetOffset(ctx, "zero", 0))
		require.NoError(t, s.Stream("invoices").ResetOffset(ctx, "audit", 0))
		require.NoError(t, s.Queue("idle").Pause(ctx))
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := s.Queue("txonly").EnqueueTx(ctx, tx, []byte("j"), store.EnqueueOpts{})
			return err
		}))
		_, err := s.Outbox("hooks").Enqueue(ctx, []byte("h"), store.EnqueueOpts{})
		require.NoError(t, err)

		// --follow would wait for events: a bound on a failure, not a pace.
		run := func(args ...string) result {
			t.Helper()
			c, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(c, binary, args...)
			cmd.Env = append(os.Environ(), "ALKSTORE_DSN="+dsn, "DATABASE_URL=")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			require.NoError(t, c.Err(), "alkstore %v did not end: %s", args, out.String())
			code := 0
			if ee, isExit := err.(*exec.ExitError); isExit {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			return result{out: out.String(), err: errb.String(), code: code}
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"streams", "tail", "nosuch"}, `alkstore: stream "nosuch": not found`},
			{[]string{"streams", "tail", "nosuch", "--json"}, `alkstore: stream "nosuch": not found`},
			{[]string{"streams", "tail", "nosuch", "--end"}, `alkstore: stream "nosuch": not found`},
			{[]string{"streams", "tail", "nosuch", "--consumer", "billing"}, `alkstore: stream "nosuch": not found`},
			{[]string{"streams", "tail", "orders", "--consumer", "biling"}, `alkstore: consumer "biling" of stream "orders": not found`},
			{[]string{"streams", "tail", "invoices", "--consumer", "billing"}, `alkstore: consumer "billing" of stream "invoices": not found`},
			{[]string{"streams", "heads", "nosuch"}, `alkstore: stream "nosuch": not found`},
			{[]string{"streams", "heads", "nosuch", "--json"}, `alkstore: stream "nosuch": not found`},
			{[]string{"queues", "jobs", "nosuch"}, `alkstore: queue "nosuch": not found`},
			{[]string{"queues", "jobs", "nosuch", "--state", "dead", "--json"}, `alkstore: queue "nosuch": not found`},
			{[]string{"queues", "jobs", "nosuch", "--after", "5"}, `alkstore: queue "nosuch": not found`},
			{[]string{"queues", "jobs", "--outbox", "nosuch", "--state", "dead"}, `alkstore: outbox "nosuch": not found`},
			{[]string{"queues", "jobs", "--outbox", "txonly"}, `alkstore: outbox "txonly": not found`},
			// Last: before session 60 these waited for events.
			{[]string{"streams", "tail", "orders", "--consumer", "biling", "--json", "--follow"}, `alkstore: consumer "biling" of stream "orders": not found`},
		} {
			r := run(c.args...)
			assert.Equal(t, exitNotFound, r.code, "alkstore %v: %s", c.args, r.err)
			assert.Equal(t, c.want, strings.TrimSpace(r.err), "alkstore %v", c.args)
			assert.Empty(t, r.out, "alkstore %v", c.args)
		}

		assert.Len(t, jsonLines(t, ok(t, dsn, "streams", "tail", "orders", "--consumer", "billing", "--json")), 2)
		assert.Len(t, jsonLines(t, ok(t, dsn, "streams", "tail", "orders", "--consumer", "zero", "--json")), 3, "a consumer at offset 0")
		assert.Empty(t, ok(t, dsn, "streams", "tail", "invoices"), "a stream known by its consumer")
		assert.Empty(t, ok(t, dsn, "streams", "tail", "invoices", "--consumer", "audit", "--json"))
		assert.Empty(t, ok(t, dsn, "streams", "heads", "orders", "--json"), "a stream without keys")
		assert.Empty(t, ok(t, dsn, "queues", "jobs", "idle", "--json"), "an idle queue (its settings row)")
		assert.Empty(t, ok(t, dsn, "queues", "jobs", "txonly", "--state", "dead", "--json"), "a queue known by its jobs")
		assert.Len(t, jsonLines(t, ok(t, dsn, "queues", "jobs", "txonly", "--json")), 1)
		assert.Empty(t, ok(t, dsn, "queues", "jobs", "--outbox", "hooks", "--state", "dead", "--json"))
		assert.Len(t, jsonLines(t, ok(t, dsn, "queues", "jobs", "--outbox", "hooks", "--json")), 1)

		// A name no stream, consumer or queue can have is still bad input.
		for _, args := range [][]string{
			{"streams", "tail", "bad\x01name"},
			{"streams", "tail", "orders", "--consumer", "bad\x01name"},
			{"queues", "jobs", "bad\x01name"},
			{"streams", "tail", "orders", "--from", "-1"},
		} {
			assert.Equal(t, exitBadInput, cli(t, dsn, args...).code, "alkstore %v", args)
		}
	})
}

// TestCLIRequeueSaysWhatIsMissing: requeue with neither a job id nor
// --all-dead says a job is missing (it said "…, not both"), and with both
// says not both; exit 2 either way, before opening anything.
func TestCLIRequeueSaysWhatIsMissing(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "none.db")
	r := cli(t, dsn, "queues", "requeue", "emails")
	assert.Equal(t, exitBadInput, r.code, r.err)
	assert.Equal(t, "alkstore: requeue emails: which job? give its ID, or --all-dead for every dead job", strings.TrimSpace(r.err))
	r = cli(t, dsn, "queues", "requeue", "emails", "7", "--all-dead")
	assert.Equal(t, exitBadInput, r.code, r.err)
	assert.Equal(t, "alkstore: give a job ID or --all-dead, not both", strings.TrimSpace(r.err))
}

// TestCLIWriteCommandsPrintJSON: with --json every write command prints one
// JSON object on stdout saying what it did, and no text line; they printed
// their text line on stderr whatever --json said (attack59).
func TestCLIWriteCommandsPrintJSON(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ok(t, dsn, "migrate", "up")
		s := open(t, dsn)
		ctx := context.Background()
		q := s.Queue("emails")
		cancel, err := q.Enqueue(ctx, []byte("a"), store.EnqueueOpts{})
		require.NoError(t, err)
		del, err := q.Enqueue(ctx, []byte("b"), store.EnqueueOpts{})
		require.NoError(t, err)
		require.NoError(t, s.Schedule("nightly").Set(ctx, store.ScheduleSpec{Spec: "@daily", Queue: "reports"}))
		_, err = s.Stream("orders").Publish(ctx, []byte("o"))
		require.NoError(t, err)
		dead := killOutboxMessage(t, s.Outbox("hooks"))

		for _, c := range []struct {
			args []string
			want map[string]any
		}{
			{[]string{"queues", "cancel", "emails", fmt.Sprint(cancel)}, map[string]any{"action": "cancel", "queue": "emails", "id": float64(cancel)}},
			{[]string{"queues", "requeue", "emails", fmt.Sprint(cancel)}, map[string]any{"action": "requeue", "queue": "emails", "id": float64(cancel)}},
			{[]string{"queues", "delete", "emails", fmt.Sprint(del)}, map[string]any{"action": "delete", "queue": "emails", "id": float64(del)}},
			{[]string{"queues", "requeue", "--outbox", "hooks", fmt.Sprint(dead)}, map[string]any{"action": "requeue", "outbox": "hooks", "id": float64(dead)}},
			{[]string{"queues", "pause", "emails"}, map[string]any{"action": "pause", "queue": "emails"}},
			{[]string{"queues", "resume", "emails"}, map[string]any{"action": "resume", "queue": "emails"}},
			{[]string{"schedules", "pause", "nightly"}, map[string]any{"action": "pause", "schedule": "nightly"}},
			{[]string{"schedules", "resume", "nightly"}, map[string]any{"action": "resume", "schedule": "nightly"}},
			{[]string{"schedules", "delete", "nightly"}, map[string]any{"action": "delete", "schedule": "nightly"}},
			{[]string{"streams", "reset", "orders", "billing", "1"}, map[string]any{"action": "reset", "stream": "orders", "consumer": "billing", "offset": float64(1)}},
			{[]string{"notify", "ch", "hi"}, map[string]any{"action": "notify", "channel": "ch"}},
		} {
			r := cli(t, dsn, append(c.args, "--json")...)
			require.Equal(t, 0, r.code, "alkstore %v: %s", c.args, r.err)
			assert.Empty(t, r.err, "alkstore %v --json", c.args)
			assert.Equal(t, []map[string]any{c.want}, jsonLines(t, r.out), "alkstore %v --json", c.args)
		}
	})
}

// TestCLIUIRefusesABadPortAndAShortToken: ui given an --addr whose port is
// no port, or a token under 16 bytes, exits 2 (bad input) before opening
// the database; the bad port exited 1 (the listen failed after the open),
// and any token was taken, "x" too (attack59).
func TestCLIUIRefusesABadPortAndAShortToken(t *testing.T) {
	typo := filepath.Join(t.TempDir(), "none.db") // no database: bad input is found first
	ui := func(token string, args ...string) result {
		cmd := exec.Command(binary, append([]string{"ui"}, args...)...)
		cmd.Env = append(os.Environ(), "ALKSTORE_DSN="+typo, "DATABASE_URL=", "ALKSTORE_UI_TOKEN="+token, "ALKSTORE_UI_PASSWORD=")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "ui %v exited 0: %s", args, errb.String())
		return result{out.String(), errb.String(), ee.ExitCode()}
	}
	for _, addr := range []string{"127.0.0.1:notaport", "127.0.0.1:65536", "127.0.0.1:-1"} {
		r := ui("", "--addr", addr)
		assert.Equal(t, exitBadInput, r.code, "--addr %s: %s", addr, r.err)
		assert.Contains(t, r.err, fmt.Sprintf("alkstore: --addr %q: port", addr))
	}
	for _, tok := range []string{"x", "0123456789abcde"} {
		for _, addr := range []string{"0.0.0.0:0", "127.0.0.1:0"} {
			r := ui(tok, "--addr", addr)
			assert.Equal(t, exitBadInput, r.code, "token %q, --addr %s: %s", tok, addr, r.err)
			assert.Equal(t, fmt.Sprintf("alkstore: ALKSTORE_UI_TOKEN is %d bytes: use at least 16 (openssl rand -hex 16 makes one)", len(tok)),
				strings.TrimSpace(r.err), "the token itself is never printed")
		}
	}
	r := ui("0123456789abcdef", "--addr", "0.0.0.0:0")
	assert.Equal(t, exitFailure, r.code, "a 16-byte token passes; the missing database stops it: %s", r.err)
	assert.Contains(t, r.err, "no SQLite database at")
}

// TestCLIUIRefusesAShortPassword: ui --user with an ALKSTORE_UI_PASSWORD
// under 12 characters exits 2 (bad input) before opening the database, on
// loopback too, saying the minimum and never the password; any password
// was taken before, "x" too, where a token under 16 bytes was refused. A
// password of 12 characters (not bytes: "é" is two) passes.
func TestCLIUIRefusesAShortPassword(t *testing.T) {
	typo := filepath.Join(t.TempDir(), "none.db") // no database: bad input is found first
	ui := func(password string, args ...string) result {
		cmd := exec.Command(binary, append([]string{"ui", "--user", "ops"}, args...)...)
		cmd.Env = append(os.Environ(), "ALKSTORE_DSN="+typo, "DATABASE_URL=", "ALKSTORE_UI_TOKEN=", "ALKSTORE_UI_PASSWORD="+password)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "ui %v exited 0: %s", args, errb.String())
		return result{out.String(), errb.String(), ee.ExitCode()}
	}
	for _, pw := range []string{"x", "hunter2hunt", "ééééééééééé"} {
		for _, addr := range []string{"0.0.0.0:0", "127.0.0.1:0"} {
			r := ui(pw, "--addr", addr)
			assert.Equal(t, exitBadInput, r.code, "password %q, --addr %s: %s", pw, addr, r.err)
			assert.Equal(t, fmt.Sprintf("alkstore: ALKSTORE_UI_PASSWORD is %d characters: use at least 12 (openssl rand -base64 12 makes one)", utf8.RuneCountInString(pw)),
				strings.TrimSpace(r.err), "the password itself is never printed")
		}
	}
	for _, pw := range []string{"hunter2hunter", "éééééééééééé"} {
		r := ui(pw, "--addr", "0.0.0.0:0")
		assert.Equal(t, exitFailure, r.code, "a password of 12 characters passes; the missing database stops it: %s", r.err)
		assert.Contains(t, r.err, "no SQLite database at")
	}
}
