package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// README.md's Go code must be code that `make test` compiles and runs. Each
// ```go block of the README is a piece, line for line, of one of
// readmeSources: store/example_test.go and client/example_test.go, whose
// Example functions go test runs and whose output it checks
// (TestReadmeSourcesRun insists that every one has an "// Output:" comment,
// without which go test only compiles it), and examples/quickstart/main.go,
// which examples/quickstart/main_test.go runs.
// Lines are compared without their indentation and with runs of spaces
// folded, so a block may be dedented and its comments aligned differently,
// and blank lines are ignored; anything else that differs fails the test.
//
// Why not compile the blocks themselves: a block is a fragment (it uses a
// store, a ctx, a payload it does not declare), so each would need a hidden
// harness kept beside the README, and an example nobody runs. This way every
// block is in an example that pkg.go.dev shows and go test runs.
var readmeSources = []string{"../store/example_test.go", "../client/example_test.go", "../alktest/example_test.go", "../examples/quickstart/main.go",
	"../examples/console-basic-auth/main.go"} // run by its main_test.go

// goBlocks returns README's ```go blocks and the line each starts on.
func goBlocks(t *testing.T, readme string) (blocks []string, lines []int) {
	t.Helper()
	var cur []string
	in := false
	for i, l := range strings.Split(readme, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in, cur = true, nil
			lines = append(lines, i+1)
		case in && strings.TrimSpace(l) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, l)
		}
	}
	require.False(t, in, "README.md: a ```go block is not closed")
	return blocks, lines
}

var spaces = regexp.MustCompile(`\s+`)

// codeLines is src's non-blank lines, trimmed, with runs of white space
// folded to one space, each followed by a newline.
func codeLines(src string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(src, "\n") {
		if l = spaces.ReplaceAllString(strings.TrimSpace(l), " "); l != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestReadmeBlocksAreRunCode(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	blocks, lines := goBlocks(t, string(readme))
	require.NotEmpty(t, blocks, "README.md has no ```go block")
	srcs := make([]string, len(readmeSources))
	for i, name := range readmeSources {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		srcs[i] = "\n" + codeLines(string(b))
	}
	for i, block := range blocks {
		want := "\n" + codeLines(block)
		found := false
		for _, src := range srcs {
			found = found || strings.Contains(src, want)
		}
		if !found {
			t.Errorf("README.md:%d: this ```go block is not a piece of any of %v; "+
				"copy it from the example it shows, or change the example first:\n%s",
				lines[i], readmeSources, block)
		}
	}
}

// TestReadmeSourcesRun: every Example in store/example_test.go and
// client/example_test.go and alktest/example_test.go has an "// Output:"
// comment, so go test runs it rather than only compiling it.
func TestReadmeSourcesRun(t *testing.T) {
	for _, name := range []string{"../store/example_test.go", "../client/example_test.go", "../alktest/example_test.go"} {
		requireExamplesRun(t, name)
	}
	_, err := os.Stat("../examples/quickstart/main_test.go")
	require.NoError(t, err, "the quick start's test, which runs it, is missing")
}

func requireExamplesRun(t *testing.T, name string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
	require.NoError(t, err)
	n := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") {
			continue
		}
		n++
		hasOutput := false
		for _, cg := range f.Comments {
			if cg.Pos() > fn.Body.Lbrace && cg.End() < fn.Body.Rbrace &&
				regexp.MustCompile(`^(Unordered output|Output):`).MatchString(cg.Text()) {
				hasOutput = true
			}
		}
		require.True(t, hasOutput, "%s has no // Output: comment, so go test would not run it", fn.Name.Name)
	}
	require.NotZero(t, n, "%s has no Example", name)
}
