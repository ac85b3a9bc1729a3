package store

import "testing"

// A receiver takes the generation before its read and waits on after(gen):
// a transaction that ended in between must not be missed, and one that
// ends while it waits must wake it.
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
	gen := r.generation()
	r.release() // ended between the read and the wait
	if !ready(r.after(gen)) {
		t.Fatal("a release after the read was missed")
	}
	gen = r.generation()
	c := r.after(gen)
	if ready(c) {
		t.Fatal("ready with no release")
	}
	r.release()
	if !ready(c) {
		t.Fatal("a release while waiting did not wake the waiter")
	}
	if ready(r.after(r.generation())) {
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
