// Package testbin builds the binaries the test packages run (the alkstore
// command, the examples) once for a whole go test run, into the module's
// git-ignored bin/.
//
// go test -p runs several packages' test binaries at once, and two of them
// (cmd/alkstore and tests) run the alkstore command. Each built it on its
// own, cmd/alkstore into a fresh temporary directory: two links of a 35 MB
// binary (2.5 CPU-seconds each here), and when a change to store had made
// the non-race packages stale, two compiles of them at once, since the
// build cache does not share a compile in progress between go commands.
// Build holds a lock on bin/.build.lock while its go build runs, so the
// builds of concurrent test binaries take turns: the later one finds the
// packages compiled and the binary up to date (go build links nothing when
// the output's build ID matches), for about half a CPU-second.
package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

const module = "module github.com/alkstore/alkstore\n"

// Root is the directory of alkstore's go.mod, found from the working
// directory up (a test binary runs in its package's directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte(module)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testbin: no go.mod of github.com/alkstore/alkstore above the working directory")
		}
		dir = parent
	}
}

// Build runs go build with args in the module's root, holding the root's
// bin/.build.lock while it runs, and returns its combined output.
func Build(args ...string) ([]byte, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(bin, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("testbin: lock %s: %w", lock.Name(), err)
	}
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = root
	return cmd.CombinedOutput()
}

// Alkstore builds the alkstore command (without -race, as an operator
// builds it) into bin/alkstore-tests and returns its absolute path.
func Alkstore() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "bin", "alkstore-tests")
	if out, err := Build("-o", path, "./cmd/alkstore"); err != nil {
		return "", fmt.Errorf("building the alkstore command: %w\n%s", err, out)
	}
	return path, nil
}
