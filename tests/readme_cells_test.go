package tests

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// README tables write code in their cells too (the River table maps each
// River call to alkstore's). Those cells are type-checked here against the
// real packages: a cell naming an exported identifier of store, client or
// alktest, or calling a method on one of the harness's variables (s, q, c,
// job, tx, ...), must be a Go expression that compiles in cellHarness. Two
// shorthands are allowed: a composite literal listing field names
// (store.JobsOpts{State, After, Limit}: each must be a field of the type)
// and an elided value (Opts{...}, Queue: ...). Columns headed "River" hold
// River's code and are not checked.

const cellHarness = `package cells

import (
	"context"
	"time"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

type (
	T struct{} // an application's job payload type
	M struct{} // an application's event type
)

var (
	_    = alktest.Work[T]
	ctx  context.Context
	s    *store.Store
	q    *store.Queue
	jq   *store.JobQueue[T]
	c    *client.Client
	tx   store.Tx
	job  *store.Job
	id   int64
	d    time.Duration
	err  error
	name string
	opts store.WorkOpts
	v    T
)

func cells() {}
`

// cellChecked: the cells this test compiles.
var cellChecked = regexp.MustCompile(`\b(store|client|alktest)\.[A-Z]|^(s|q|jq|c|job|tx)\.[A-Z]`)

// elided marks a value written "..." in a cell.
const elided = "elided_"

type readmeCell struct {
	line int
	code string
}

// tableCodeCells returns the code spans of README's table cells, but those
// in columns headed "River".
func tableCodeCells(readme string) []readmeCell {
	var cells []readmeCell
	var header []string
	span := regexp.MustCompile("`([^`]+)`")
	for i, l := range strings.Split(readme, "\n") {
		if !strings.HasPrefix(l, "|") {
			header = nil
			continue
		}
		cols := strings.Split(strings.Trim(l, "| "), "|")
		if header == nil {
			header = cols
			continue
		}
		for j, col := range cols {
			if j < len(header) && strings.TrimSpace(header[j]) == "River" {
				continue
			}
			for _, m := range span.FindAllStringSubmatch(col, -1) {
				cells = append(cells, readmeCell{line: i + 1, code: m[1]})
			}
		}
	}
	return cells
}

// exportData maps the harness's imports (and their dependencies) to their
// compiled export data, as the gc importer reads it.
func exportData(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.CommandContext(ctx(t), "go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}",
		"context", "time", "../store", "../client", "../alktest").Output()
	require.NoError(t, err, "go list -export")
	m := map[string]string{}
	for l := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(l), " "); ok && file != "" {
			m[path] = file
		}
	}
	return m
}

func TestReadmeTableCellsCompile(t *testing.T) {
	// Parallel: go list compiles store, client and alktest without -race,
	// as the examples' build beside the serial tests does; as a serial
	// test it ran beside that build and waited for its own compile of the
	// same packages (53 s in a make test at load 14-27, 1.3 s when the
	// examples' build had ended first). In the parallel phase it finds
	// them built.
	parallelTest(t)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	var cells []readmeCell
	for _, cell := range tableCodeCells(string(readme)) {
		if cellChecked.MatchString(cell.code) {
			cells = append(cells, cell)
		}
	}
	require.NotEmpty(t, cells, "README.md has no code in its tables")
	check := cellChecker(t)
	for _, cell := range cells {
		if err := check(cell.code); err != nil {
			t.Errorf("README.md:%d: the table cell `%s` does not compile: %v", cell.line, cell.code, err)
		}
	}
}

// TestReadmeCellCheckerRefuses: the checker above fails cells that do not
// compile, the River table's old UniqueOpts cell among them.
func TestReadmeCellCheckerRefuses(t *testing.T) {
	parallelTest(t) // as TestReadmeTableCellsCompile
	check := cellChecker(t)
	for _, bad := range []string{
		"store.EnqueueOpts{Unique: &store.UniqueOpts{Key, ByPeriod, ByState}}", // Unique is a value
		"store.JobsOpts{State, After, Limits}",                                 // no field Limits
		"s.Schedule(name).Set(ctx, store.ScheduleSpec{Spec: 1, Queue: ...})",   // Spec is a string
		"q.Pause()",
		"store.Nothing",
		"c.HandleJobs(jq, opts, func(ctx, job, v T) error)",
	} {
		assert.Error(t, check(bad), bad)
	}
	for _, good := range []string{"store.JobsOpts{State, After, Limit}", "client.New(s, client.Opts{...})", "return store.Snooze(d)"} {
		assert.NoError(t, check(good), good)
	}
}

// cellChecker type-checks the harness and returns a checker of one cell.
func cellChecker(t *testing.T) func(code string) error {
	exports := exportData(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "cells.go", cellHarness, 0)
	require.NoError(t, err)
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if file, ok := exports[path]; ok {
			return os.Open(file)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})}
	pkg, err := conf.Check("cells", fset, []*ast.File{f}, nil)
	require.NoError(t, err, "the harness itself")
	body := f.Decls[len(f.Decls)-1].(*ast.FuncDecl).Body.Lbrace + 1
	return func(code string) error { return checkCell(fset, pkg, body, code) }
}

// checkCell type-checks one cell's code in the harness's scope.
func checkCell(fset *token.FileSet, pkg *types.Package, pos token.Pos, code string) error {
	src := strings.TrimPrefix(code, "return ")
	src = regexp.MustCompile(`\.\.\.`).ReplaceAllString(src, elided)
	expr, err := parser.ParseExpr(src)
	if err != nil {
		return err
	}
	// Shorthands: take the field names out of the literals, check them after.
	type fieldNames struct {
		lit   *ast.CompositeLit
		names []string
	}
	var lists []fieldNames
	ast.Inspect(expr, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		var names []string
		var kept []ast.Expr
		for _, e := range lit.Elts {
			switch e := e.(type) {
			case *ast.Ident: // a listed field name, or {...}
				if e.Name != elided {
					names = append(names, e.Name)
				}
			case *ast.KeyValueExpr:
				if id, ok := e.Value.(*ast.Ident); ok && id.Name == elided {
					names = append(names, e.Key.(*ast.Ident).Name)
				} else {
					kept = append(kept, e)
				}
			default:
				kept = append(kept, e)
			}
		}
		if len(kept) != len(lit.Elts) {
			if len(kept) > 0 && len(names) > 0 {
				if _, ok := kept[0].(*ast.KeyValueExpr); !ok {
					return true // positional values: leave it to the type checker
				}
			}
			lit.Elts = kept
			lists = append(lists, fieldNames{lit, names})
		}
		return true
	})
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	if err := types.CheckExpr(fset, pkg, pos, expr, info); err != nil {
		return err
	}
	for _, l := range lists {
		typ := info.Types[l.lit].Type
		for _, n := range l.names {
			if obj, _, _ := types.LookupFieldOrMethod(typ, false, pkg, n); obj == nil {
				return fmt.Errorf("%s has no field %s", typ, n)
			} else if _, ok := obj.(*types.Var); !ok {
				return fmt.Errorf("%s.%s is not a field", typ, n)
			}
		}
	}
	return nil
}

// TestReadmeListsEverySchemaVersion: README's table of schema versions has a
// row for each migration in schema/pg (it once stopped at 00004, and the
// goose section quoted a range that stopped there too).
func TestReadmeListsEverySchemaVersion(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	files, err := filepath.Glob("../schema/pg/000*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		row := "| `" + strings.TrimSuffix(filepath.Base(f), ".sql") + "` |"
		assert.Contains(t, string(readme), row, "README.md's schema table has no row for %s", f)
	}
}
