package store

import (
	"fmt"
	"strings"
	"testing"
)

// eachSavepoint reads the savepoint statements of a text as each engine
// names savepoints; trackSavepoints matches them by those names.
func TestEachSavepointReadsNamesAsTheEngineDoes(t *testing.T) {
	read := func(sql string, pg bool) string {
		var out []string
		eachSavepoint(sql, pg, func(step savepointStep, name string) {
			out = append(out, fmt.Sprintf("%d:%s", step, name))
		})
		return strings.Join(out, " ")
	}
	long := strings.Repeat("x", 70)
	for _, c := range []struct {
		sql      string
		pg, lite string
	}{
		{"SAVEPOINT a", "1:a", "1:a"},
		{"savepoint Mixed_1", "1:mixed_1", "1:mixed_1"},
		{`SAVEPOINT "Q"`, "1:Q", "1:q"},
		{`SAVEPOINT "a""b"`, `1:a"b`, `1:a"b`},
		{"RELEASE a; RELEASE SAVEPOINT b", "2:a 2:b", "2:a 2:b"},
		{"RELEASE savepoint1", "2:savepoint1", "2:savepoint1"},
		{"ROLLBACK TO a", "3:a", "3:a"},
		{"rollback transaction to savepoint B", "3:b", "3:b"},
		{"ROLLBACK WORK TO SAVEPOINT c", "3:c", "3:c"},
		{"-- x\nSELECT 1; /* y */ SAVEPOINT a /* z */; ROLLBACK TO a -- w", "1:a 3:a", "1:a 3:a"},
		{"SELECT 'SAVEPOINT x'; SELECT 1", "", ""},
		{"ROLLBACK", "", ""},
		{"SAVEPOINT a b", "1:", "1:"},
		{"SAVEPOINT", "1:", "1:"},
		{"SAVEPOINT [a]; SAVEPOINT `b`; SAVEPOINT 'c'", "1: 1: 1:", "1:a 1:b 1:c"},
		{`ROLLBACK TO U&"a"`, "3:", "3:"},
		{"SAVEPOINT " + long, "1:" + long[:63], "1:" + long},
		{"SAVEPOINT a$1", "1:a$1", "1:"},
	} {
		if got := read(c.sql, true); got != c.pg {
			t.Errorf("pg %q: %q, want %q", c.sql, got, c.pg)
		}
		if got := read(c.sql, false); got != c.lite {
			t.Errorf("lite %q: %q, want %q", c.sql, got, c.lite)
		}
	}
}

// The savepoint a transactional handler runs after on SQLite (execOwn)
// costs its transaction no allocation to keep account of.
func TestHandlerSavepointIsAccountedWithoutAllocating(t *testing.T) {
	st := &txState{owned: true}
	fn := func() {}
	st.afterCommit = append(st.afterCommit, fn)
	allocs := testing.AllocsPerRun(100, func() {
		st.savepoints = nil
		st.trackSavepoints("SAVEPOINT alkstore_handler;", false)
	})
	if allocs != 0 {
		t.Errorf("%v allocations a handler savepoint", allocs)
	}
	if len(st.savepoints) != 1 || st.savepoints[0] != (savepointMark{name: "alkstore_handler", commits: 1}) {
		t.Errorf("marks %+v", st.savepoints)
	}
}

// A rollback to a savepoint drops the commit actions registered since and
// runs the rollback actions registered since, once; RELEASE keeps them for
// the enclosing level; an unknown name changes nothing.
func TestRollbackToASavepointUndoesTheActionsRegisteredSince(t *testing.T) {
	st := &txState{owned: true}
	var ran []string
	commit := func(n string) { st.afterCommit = append(st.afterCommit, func() { ran = append(ran, "commit "+n) }) }
	rollback := func(n string) {
		st.afterRollback = append(st.afterRollback, func() { ran = append(ran, "rollback "+n) })
	}
	commit("a")
	st.trackSavepoints("SAVEPOINT s1", true)
	commit("b")
	rollback("b")
	st.trackSavepoints("SAVEPOINT s2", true)
	commit("c")
	rollback("c")
	st.trackSavepoints("RELEASE s2; ROLLBACK TO nosuch", true)
	if len(st.afterCommit) != 3 || len(st.afterRollback) != 2 || len(ran) != 0 {
		t.Fatalf("after RELEASE: %d commit, %d rollback actions, ran %v", len(st.afterCommit), len(st.afterRollback), ran)
	}
	st.trackSavepoints("ROLLBACK TO SAVEPOINT S1", true)
	if want := "rollback b,rollback c"; strings.Join(ran, ",") != want {
		t.Errorf("ran %v, want %s", ran, want)
	}
	if len(st.afterCommit) != 1 || len(st.afterRollback) != 0 || len(st.savepoints) != 1 {
		t.Errorf("after ROLLBACK TO: %d commit, %d rollback actions, %d savepoints", len(st.afterCommit), len(st.afterRollback), len(st.savepoints))
	}
	ran = nil
	st.trackSavepoints("ROLLBACK TO s1", true) // again: nothing registered since
	if len(ran) != 0 || len(st.afterCommit) != 1 {
		t.Errorf("second ROLLBACK TO ran %v", ran)
	}
}

// BenchmarkHandlerSavepointAccount is what keeping account of the
// savepoint a transactional handler runs after on SQLite adds to each job.
func BenchmarkHandlerSavepointAccount(b *testing.B) {
	st := &txState{owned: true}
	b.ReportAllocs()
	for b.Loop() {
		st.savepoints = nil
		st.trackSavepoints("SAVEPOINT alkstore_handler;", false)
	}
}
