package store

import (
	"context"
	"fmt"
	"time"
)

// handle is what every mechanism handle (Stream, Queue, ...) holds: its
// store, its name, and the verdict on that name, reported by every
// operation so that creating a handle never does I/O or fails.
type handle struct {
	s    *Store
	name string
	err  error
}

func newHandle(s *Store, name string) handle {
	return handle{s: s, name: name, err: validateName(name)}
}

// target is where an operation runs: the statements (auto-commit or the
// caller's transaction) and how to do something once its writes are
// committed (afterCommit: at once for auto-commit; at commit for a
// transaction).
type target struct {
	ops
	// tx is the caller's transaction and ctx the operation's, in a
	// transaction (tx.h is nil in auto-commit). The target keeps them
	// rather than closures over them (afterCommit, failed): a closure
	// cost every operation in a transaction an allocation each.
	tx    Tx
	ctx   context.Context
	auto  bool // auto-commit: the operation waits for a connection of its own
	write bool // an auto-commit write: on SQLite it waits for the writer slot
	// adopted: in a transaction adopted with AdoptPgx or AdoptSQL, which
	// the store cannot wait for or roll back, so each operation in it
	// counts as running, like an auto-commit one (see Shutdown).
	adopted bool
}

// afterCommit runs fn once the operation's writes are committed: at once
// outside a transaction, at the commit in one (Tx.onCommit).
func (t target) afterCommit(fn func()) {
	if t.tx.h == nil {
		fn()
		return
	}
	t.tx.onCommit(fn)
}

// failed is told the operation's error and returns it as the caller sees
// it: in a transaction, Tx.failed's; outside one, err itself.
func (t target) failed(err error) error {
	if t.tx.h == nil {
		return err
	}
	return t.tx.failed(t.ctx, err)
}

// wakeAtCommit wakes the stream's waiters in this process once the
// operation's writes commit: at once for auto-commit (calling the hub
// directly), at the commit in a transaction (with the stream's own wakeFn:
// a closure made per write cost each an allocation).
func (t target) wakeAtCommit(st *Stream) {
	if t.auto {
		st.s.hub.Wake(st.topic)
		return
	}
	t.afterCommit(st.wakeFn)
}

// wakeAfter is wakeAtCommit for a write that returned err: an auto-commit
// write that failed may have committed all the same (its reply lost), and
// this process does not hear its own stream wakes back (heardOwnWrite). A
// wake more is harmless.
func (t target) wakeAfter(st *Stream, err error) {
	if err == nil || t.auto {
		t.wakeAtCommit(st)
	}
}

// via chooses the target of an operation.
type via func(s *Store) (target, error)

// autoWrite is an auto-commit write made with ctx. On SQLite it needs the
// writer slot, so it is refused at once when ctx's own transaction holds
// the slot (see writerHeldBy) instead of waiting for itself.
func autoWrite(ctx context.Context) via {
	return func(s *Store) (target, error) {
		if err := s.check(); err != nil {
			return target{}, err
		}
		if err := s.writerHeldBy(ctx); err != nil {
			return target{}, err
		}
		return target{ops: s.eng.writeOps(), auto: true, write: true}, nil
	}
}

func autoRead(s *Store) (target, error) {
	if err := s.check(); err != nil {
		return target{}, err
	}
	return target{ops: s.eng.readOps(), auto: true}, nil
}

// run is the one path every operation takes: the handle's name is checked,
// the target is chosen (which also checks the store is open), and any error
// is wrapped with the operation and the handle's name.
func run[T any](h handle, op string, v via, fn func(target) (T, error)) (T, error) {
	var zero T
	switch {
	case h.s == nil:
		return zero, opErr(op, h.name, errNoStore)
	case h.err != nil:
		return zero, opErr(op, h.name, h.err)
	}
	t, err := v(h.s)
	if err != nil {
		return zero, opErr(op, h.name, err)
	}
	if t.auto || t.adopted {
		if err := h.s.life.enterOp(); err != nil { // a graceful shutdown waits for it
			return zero, opErr(op, h.name, err)
		}
		defer h.s.life.leaveOp()
	}
	if t.auto {
		defer h.s.life.whileWaiting()() // a dropped transaction may hold what it waits for
	}
	if t.write {
		defer h.s.watchWriterSlot(op, h.name)() // or one open on this goroutine: say so
	}
	res, err := fn(t)
	if err != nil {
		err = t.failed(err)
		return zero, opErr(op, h.name, h.s.driverErr(err))
	}
	return res, nil
}

// run0 is run for an operation with no result.
func run0(h handle, op string, v via, fn func(target) error) error {
	_, err := run(h, op, v, func(t target) (struct{}, error) { return struct{}{}, fn(t) })
	return err
}

// errNoStore is what a zero-value handle or a nil *Store reports instead of
// panicking: handles come from a Store (s.Queue, s.Stream, ...).
var errNoStore = fmt.Errorf("%w: no store (a zero-value handle or a nil *Store; get handles from an open Store)", ErrInvalidArgument)

// now reads the store's clock at the precision both engines store.
func (s *Store) now() time.Time {
	return s.clock().Truncate(time.Microsecond)
}
