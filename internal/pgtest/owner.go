package pgtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A run that ends abnormally (a test's panic, go test -timeout, SIGINT,
// SIGKILL) runs none of its cleanup: it left its throwaway clusters'
// directories (55 MB each before any test database, up to eight a run)
// and its SQLite templates in TMPDIR. So every such directory belongs to
// the process that made it, which holds a lock on the directory's owner
// file for as long as it runs (the kernel drops it however the process
// ends), and the first cluster or directory a process makes sweeps away
// the directories whose owners are gone (Sweep). The postmaster dies with
// its owner (Pdeathsig); Sweep stops one that did not.

// ownerFile is the file in an owned directory that its owner keeps locked.
const ownerFile = "alkstore-owner"

// sweptPrefix starts the names of the directories Sweep looks at.
const sweptPrefix = "alkstore-"

// legacyPrefixes name directories made before owner files: Sweep removes
// one of those that has no owner file once it is legacyAge old (no run
// lasts that long; a younger one may be a running older harness's) and
// no postmaster runs in it. An owned directory has no owner file for the
// moment between its mkdir and the owner file's rename, too.
var legacyPrefixes = []string{"alkstore-pg-", "alkstore-template-", "alkstore-skewed-", "alkstore-cli-"}

const legacyAge = time.Hour

var (
	sweepOnce sync.Once
	ownedMu   sync.Mutex
	owned     = map[string]*os.File{} // owned directory → its locked owner file
)

// TempDir makes a directory in os.TempDir() named prefix (which starts
// with "alkstore-") and a random string, owned by this process: if it
// ends without RemoveTempDir, the next Sweep removes the directory. The
// first call, like the first throwaway cluster's start, sweeps first.
func TempDir(prefix string) (string, error) {
	return tempDirIn(os.TempDir(), prefix)
}

// tempDirIn is TempDir in base (os.TempDir() or clusterBase()).
func tempDirIn(base, prefix string) (string, error) {
	if !strings.HasPrefix(prefix, sweptPrefix) {
		return "", fmt.Errorf("pgtest: TempDir(%q): the prefix must start with %q", prefix, sweptPrefix)
	}
	sweepOnce.Do(func() {
		// memDir whatever base this run chose: a run that sets TMPDIR, or
		// finds memDir short of room (perhaps for the abandoned clusters
		// in it), still frees the RAM an aborted run left there.
		Sweep(os.TempDir())
		if fi, err := os.Stat(memDir); err == nil && fi.IsDir() && memDir != os.TempDir() {
			Sweep(memDir)
		}
	})
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return "", err
	}
	// The owner file appears already locked (a rename keeps the lock), so
	// a sweep never takes a directory being made for an abandoned one.
	tmp := filepath.Join(dir, ownerFile+".new")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_RDWR, 0o644)
	if err == nil {
		if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			_, _ = fmt.Fprintf(f, "%d\n", os.Getpid()) // for a person looking
			err = os.Rename(tmp, filepath.Join(dir, ownerFile))
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("pgtest: own %s: %w", dir, err)
	}
	ownedMu.Lock()
	owned[dir] = f // referenced: its finalizer would close it and drop the lock
	ownedMu.Unlock()
	return dir, nil
}

// RemoveTempDir removes a directory TempDir made, in the background (see
// removeLater); the directory stays owned until it is gone.
func RemoveTempDir(dir string) {
	ownedMu.Lock()
	f := owned[dir]
	delete(owned, dir)
	ownedMu.Unlock()
	removeLater(dir, f)
	if f != nil {
		f.Close()
	}
}

// Sweep removes the owned directories in tmp whose owner process is gone,
// stopping first a postmaster still running in one, and the legacy ones
// (legacyPrefixes) abandoned. It never touches a directory whose owner
// runs: several test binaries (go test ./...) start clusters at once. It
// returns the directories it removes (in the background, holding the
// owner's lock until they are gone).
func Sweep(tmp string) []string {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil
	}
	var swept []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), sweptPrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		f, err := os.Open(filepath.Join(dir, ownerFile))
		switch {
		case err == nil:
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
				f.Close() // its owner runs
				continue
			}
			stopPostmaster(dir)
			removeLater(dir, f)
			f.Close()
			swept = append(swept, dir)
		case errors.Is(err, fs.ErrNotExist) && legacy(e.Name()):
			fi, err := e.Info()
			if err != nil || time.Since(fi.ModTime()) < legacyAge || postmaster(dir) != 0 {
				continue
			}
			removeLater(dir, nil)
			swept = append(swept, dir)
		}
	}
	return swept
}

func legacy(name string) bool {
	for _, p := range legacyPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// postmaster returns the process id of the postmaster running on the
// cluster in dir (its data directory dir/data), or 0: none, or a process
// that took a dead postmaster's id, or a zombie.
func postmaster(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 || !alive(pid) {
		return 0
	}
	// The postmaster works in its data directory.
	cwd, err := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return 0
	}
	if data, err := os.Stat(filepath.Join(dir, "data")); err != nil || !os.SameFile(cwd, data) {
		return 0
	}
	return pid
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state ppid ...
	return len(f) > 0 && f[0] != "Z"
}

// stopPostmaster stops the postmaster still running on the cluster in dir
// (its owner is gone): an immediate shutdown (SIGQUIT; the data is thrown
// away), then SIGKILL if it has not ended in 10 s. It waits until the
// postmaster has ended, 15 s at most.
func stopPostmaster(dir string) {
	pid := postmaster(dir)
	if pid == 0 {
		return
	}
	if _ = syscall.Kill(pid, syscall.SIGQUIT); !ended(pid, 10*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		ended(pid, 5*time.Second)
	}
}

// ended waits for process pid to end, d at most, and reports whether it did.
func ended(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// removeLater removes dir in a process of its own that outlives this one:
// a test run leaves some 300 databases (3 GB in 90,000 files), and on a
// file system mounted with discard (this machine's) unlinking them took a
// minute, which the test binary spent after its last test. The rm holds
// owner (dir's locked owner file, if not nil) until it ends, so no sweep
// takes dir for abandoned meanwhile. Without rm, or when it cannot start,
// dir is removed here.
func removeLater(dir string, owner *os.File) {
	rm := exec.Command("rm", "-rf", dir) // no Stdout or Stderr: go test does not wait for it
	rm.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if owner != nil {
		rm.ExtraFiles = []*os.File{owner}
	}
	if err := rm.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return
	}
	_ = rm.Process.Release()
}

// memDir is where throwaway clusters go when TMPDIR is not set: a tmpfs
// with room for a run's databases (clusterBase).
const memDir = "/dev/shm"

// memDirRoom is the free space memDir needs: a run's clusters hold about
// a gigabyte at once now that each test's databases are dropped when it
// ends (tests' pool.release), against 3 GB when they were kept.
const memDirRoom = 4 << 30

// clusterBase is the directory throwaway clusters are made in: TMPDIR if
// it is set, else memDir if it is a tmpfs with memDirRoom free, else
// os.TempDir(). On this machine's ext4 /tmp, CREATE DATABASE's copy of a
// migrated database (about a thousand files) cost the server 23-123 ms of
// CPU, and 300-370 ms of wall time, as ext4 looked for free inodes among
// the many files test runs had just deleted; on tmpfs 18 ms and 75 ms.
func clusterBase() string {
	if os.Getenv("TMPDIR") != "" {
		return os.TempDir()
	}
	var fs syscall.Statfs_t
	const tmpfsMagic = 0x01021994
	if syscall.Statfs(memDir, &fs) == nil && fs.Type == tmpfsMagic && fs.Bavail*uint64(fs.Bsize) >= memDirRoom {
		return memDir
	}
	return os.TempDir()
}
