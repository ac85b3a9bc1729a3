package pgtest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// disown drops this process's lock on dir, as its end would.
func disown(t *testing.T, dir string) {
	t.Helper()
	ownedMu.Lock()
	f := owned[dir]
	delete(owned, dir)
	ownedMu.Unlock()
	if f == nil {
		t.Fatalf("%s is not owned", dir)
	}
	f.Close()
}

func waitGone(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there", dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSweep: Sweep removes the directories whose owner is gone, stopping
// the postmaster that still runs in one first, and the legacy ones (no
// owner file) an hour old without a postmaster; it leaves alone owned
// directories whose owner runs, younger legacy ones, and others.
func TestSweep(t *testing.T) {
	if os.Getenv("ALK_PG_DSN") != "" {
		t.Skip("ALK_PG_DSN names the server: no throwaway cluster to sweep")
	}
	tmp := t.TempDir()
	for _, d := range []string{tmp, filepath.Dir(tmp)} { // run as root, the cluster runs as postgres
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", tmp)
	srv, err := StartForTests()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ownedDir, err := TempDir("alkstore-template-")
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveTempDir(ownedDir)
	disowned, err := TempDir("alkstore-template-")
	if err != nil {
		t.Fatal(err)
	}
	disown(t, disowned)
	old := time.Now().Add(-2 * legacyAge)
	mkdir := func(name string, mtime time.Time) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(d, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return d
	}
	oldLegacy := mkdir("alkstore-pg-legacy", old)
	youngLegacy := mkdir("alkstore-template-legacy", time.Now())
	other := mkdir("alkstore-other", old)

	sweep := func(want ...string) {
		t.Helper()
		swept := Sweep(tmp)
		if len(swept) != len(want) {
			t.Fatalf("swept %q, want %q", swept, want)
		}
		for _, d := range want {
			if !slices.Contains(swept, d) {
				t.Fatalf("swept %q, want %q", swept, want)
			}
			waitGone(t, d)
		}
	}
	sweep(disowned, oldLegacy)
	disown(t, srv.Dir()) // its owner is gone, its postmaster runs
	if postmaster(srv.Dir()) != srv.Pid() {
		t.Fatal("the postmaster does not run")
	}
	sweep(srv.Dir())
	if alive(srv.Pid()) {
		t.Fatal("the abandoned cluster's postmaster still runs")
	}
	for _, d := range []string{ownedDir, youngLegacy, other} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
}
