package store

import "testing"

// A held reader takes a mark before its read and waits on after: the end
// of a transaction that began before the run's first read must not be
// missed, whether it ends between that read and the wait or while a later
// read of the run is under way or waits; one that began after it does not
// wake the run.
func TestHorizonReleaseMissesNoEnd(t *testing.T) {
	var r horizonRelease
	ready := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	old := r.begin() // began before the run
	var run heldRun
	m := r.mark()
	hold, first := run.track(m, true, false)
	if !first || hold != old {
		t.Fatalf("first held read: hold %d first %v, want %d true", hold, first, old)
	}
	r.release(old) // ended between the first read and its wait
	if !ready(r.after(m, hold, first)) {
		t.Fatal("an end between the run's first read and its wait was missed")
	}

	older, newer := r.begin(), uint64(0)
	m = r.mark()
	if hold, first = run.track(m, true, false); first {
		t.Fatal("a held read after a held read began a run")
	}
	c := r.after(m, hold, first)
	if ready(c) {
		t.Fatal("ready with no end")
	}
	newer = r.begin() // began during the run: its end is no news to it
	r.release(newer)
	if ready(c) {
		t.Fatal("the end of a transaction begun during the run woke it")
	}
	// the first read of a new run registers its own, newer hold
	run.track(r.mark(), false, false)
	m = r.mark()
	hold, first = run.track(m, true, false)
	c = r.after(m, hold, first)
	if ready(c) {
		t.Fatal("a new run's wait ready with no end since its mark")
	}
	r.release(older) // began before both runs, ends while the run waits
	if !ready(c) {
		t.Fatal("an end while waiting did not wake the waiter")
	}
	m = r.mark()
	hold, first = run.track(m, true, true) // delivered: a new run
	if !first || hold != m.begins {
		t.Fatal("a held read that delivered did not begin a run")
	}
	if ready(r.after(m, hold, first)) {
		t.Fatal("a fresh wait is ready at once")
	}
}

func TestNextRecheckDoublesWithinBounds(t *testing.T) {
	d, n := nextRecheck(0), 0
	if d != heldRecheckMin {
		t.Fatalf("first recheck %v, want %v", d, heldRecheckMin)
	}
	for d < heldRecheckMax {
		next := nextRecheck(d)
		if next != min(2*d, heldRecheckMax) {
			t.Fatalf("after %v: %v", d, next)
		}
		d, n = next, n+1
	}
	if nextRecheck(d) != heldRecheckMax || n > 12 {
		t.Fatalf("capped at %v after %d steps", nextRecheck(d), n)
	}
}
