package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gooseTags leave every goose driver out but Postgres and SQLite, so the CLI
// builds in seconds instead of compiling ClickHouse, MSSQL, MySQL, Vertica,
// YDB and libsql. The Makefile's GOOSE_TAGS and the README's install command
// say the same (TestGooseBuildIsTheMakefiles).
const gooseTags = "no_clickhouse,no_libsql,no_mssql,no_mysql,no_vertica,no_ydb"

var gooseBuild struct {
	once sync.Once
	path string
	err  error
}

// gooseBin is the pinned goose CLI, built once per go test run into ../bin
// exactly as `make tools` builds it (so after make it is a no-op), with no
// deadline: on a cold build cache the compile happens here, before the
// calling test starts its context, never inside a test's deadline. Call it
// before ctx(t).
func gooseBin(t testing.TB) string {
	t.Helper()
	gooseBuild.once.Do(func() {
		gooseBuild.path, gooseBuild.err = filepath.Abs("../bin/goose")
		if gooseBuild.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-modfile=../tools/go.mod", "-tags="+gooseTags,
			"-o", gooseBuild.path, "github.com/pressly/goose/v3/cmd/goose")
		if out, err := cmd.CombinedOutput(); err != nil {
			gooseBuild.err = fmt.Errorf("building the goose CLI: %w\n%s", err, out)
		}
	})
	require.NoError(t, gooseBuild.err)
	return gooseBuild.path
}

// TestGooseBuildIsTheMakefiles: the tests, `make tools` and the README's
// install command for DBAs build the same slim goose, at the version
// tools/go.mod pins, so make's build is the tests' and a DBA's is what the
// tests ran.
func TestGooseBuildIsTheMakefiles(t *testing.T) {
	makefile, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	assert.Contains(t, string(makefile), "GOOSE_TAGS := "+gooseTags+"\n")

	toolsMod, err := os.ReadFile("../tools/go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`github\.com/pressly/goose/v3 (v\S+)`).FindSubmatch(toolsMod)
	require.NotNil(t, m, "tools/go.mod pins no goose version")
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "go install -tags "+gooseTags+" github.com/pressly/goose/v3/cmd/goose@"+string(m[1]))
}
