package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/alkstore/alkstore/internal/wake"
)

// SubscribeOpts tune an EventReceiver (Stream.Subscribe). Zero values take
// the defaults; a negative value is refused with ErrInvalidArgument, as in
// WorkOpts and GroupOpts.
//
// Auto-save covers only events the caller has finished with: an event counts
// as finished once the caller asks for the next one (calls Recv or TryRecv
// again), never when it is handed out. A consumer that dies while processing
// an event therefore gets it again after a restart (at-least-once). The last
// event before a pause stays unsaved until the next Recv or TryRecv; call
// SaveOffset to save the last event Recv returned yourself.
//
// On PostgreSQL a receiver whose read stopped at the settled horizon below
// committed events (a write transaction the store could not yet prove
// ended or began after them still runs, anywhere on the server; its own
// offsets may all be higher) reads again after 1 ms, doubling to 1 s
// (never past SafetyPoll), until the horizon passes them: the transaction
// holding it may end without a wake (a rollback, a killed session, a
// transaction that published nothing). The end of a Tx of the same store
// wakes it at once. A Tx of the same store (Begin, InTx, WorkTx) holds
// what the store published or read before the Tx began only until its
// first publish: that shows the store the Tx began after them (then only
// transactions older than the Tx hold them), and wakes the receiver. A Tx
// that has not published yet, or never does (only EnqueueTx or your own
// SQL), an adopted one and another process's hold such events until they
// end (see docs/design/stream-horizon.md).
type SubscribeOpts struct {
	Buffer   int // events read ahead of Recv; default 16, at most MaxSubscribeBuffer
	PageSize int // events per read; default 256
	// PageBytes bounds the bytes one read of the stream holds, its events'
	// payloads, keys and headers added up: a page ends before the event
	// that would take it past PageBytes (its first event is taken whatever
	// its size), and the events after the cut come in the next read, none
	// skipped, as GroupOpts.PageBytes does for a group member. Default
	// DefaultSubscribePageBytes (16 MiB). Besides the page being read, the
	// receiver holds up to Buffer events read ahead.
	PageBytes        int
	AutoSaveEvery    int           // save the finished position every N finished events; 0: off
	AutoSaveInterval time.Duration // save the finished position at most this often (checked on each Recv/TryRecv); 0: off
	RetryInterval    time.Duration // after a failed read, retry this soon unless a wake comes; default 1s
	SafetyPoll       time.Duration // re-read this often even without a wake (wakes are best-effort); default 5s
	Logger           *slog.Logger  // for auto-save failures; default the store's logger
}

// check refuses negative options (before: they took the defaults), and a
// Buffer above MaxSubscribeBuffer: the receiver allocates its buffer up
// front, so a huge one panicked in make or ran the process out of memory.
func (o SubscribeOpts) check() error {
	if o.Buffer < 0 || o.PageSize < 0 || o.PageBytes < 0 || o.AutoSaveEvery < 0 || o.AutoSaveInterval < 0 || o.RetryInterval < 0 || o.SafetyPoll < 0 {
		return fmt.Errorf("%w: negative Buffer, PageSize, PageBytes, AutoSaveEvery, AutoSaveInterval, RetryInterval or SafetyPoll", ErrInvalidArgument)
	}
	if o.Buffer > MaxSubscribeBuffer {
		return fmt.Errorf("%w: Buffer %d is above %d", ErrInvalidArgument, o.Buffer, MaxSubscribeBuffer)
	}
	return nil
}

// MaxSubscribeBuffer is the largest SubscribeOpts.Buffer: events read ahead
// of Recv, whose slots a receiver allocates when it starts.
const MaxSubscribeBuffer = 1 << 16

// DefaultSubscribePageBytes bounds what one read of a receiver holds
// unless SubscribeOpts.PageBytes says otherwise: 16 MiB of payloads, keys
// and headers, as a group member's (DefaultGroupPageBytes), where 256
// events at MaxPayloadSize were 1 GiB.
const DefaultSubscribePageBytes = DefaultGroupPageBytes

type item struct {
	ev  Event
	err error
}

// EventReceiver delivers a consumer's events in offset order: it replays
// from the consumer's saved offset, then follows new events as wakes
// arrive. It reads ahead into a bounded buffer, so a slow consumer parks the
// reader rather than piling events up in memory.
type EventReceiver struct {
	src     streamSource
	wakes   *wake.Sub
	release *horizonRelease // the store's: a Tx ended (see heldReport)
	opts    SubscribeOpts
	pages   pager  // the reader goroutine's: PageSize events and PageBytes bytes a read
	onClose func() // run once, by Close: the store forgets the receiver

	items     chan item
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the reader goroutine ended
	closed    chan struct{} // closed once Recv must report ErrClosed
	once      sync.Once
	stopOnce  sync.Once
	closeHook sync.Once
	cause     error // why it closed, for Recv

	mu       sync.Mutex
	position int64 // last offset yielded by Recv or TryRecv
	pending  bool  // position was yielded and the caller has not asked for the next event yet
	finished int64 // last offset the caller finished with: auto-save never goes past it
	saved    int64 // last position saved
	unsaved  int   // events finished since the last save
	lastSave time.Time
}

// newEventReceiver starts a receiver. wakes must already be subscribed (a
// commit between the first read and the subscription would otherwise go
// unnoticed); the receiver owns it from now on. onClose runs once, by Close.
func newEventReceiver(ctx context.Context, src streamSource, wakes *wake.Sub, opts SubscribeOpts, onClose func()) (*EventReceiver, error) {
	if opts.Buffer <= 0 {
		opts.Buffer = 16
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 256
	}
	if opts.PageBytes <= 0 {
		opts.PageBytes = DefaultSubscribePageBytes
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Second
	}
	if opts.SafetyPoll <= 0 {
		opts.SafetyPoll = 5 * time.Second
	}
	start, err := src.Offset(ctx)
	if err != nil {
		wakes.Close()
		return nil, err
	}
	r := &EventReceiver{src: src, wakes: wakes, release: &src.st.s.held, opts: opts, onClose: onClose,
		pages: pager{size: opts.PageSize, bytes: opts.PageBytes}, items: make(chan item, opts.Buffer),
		stop: make(chan struct{}), done: make(chan struct{}), closed: make(chan struct{}), lastSave: time.Now()}
	go r.run(start)
	return r, nil
}

// run drains from the cursor to the horizon, parks until a wake, and
// repeats. It ends on Close or when the wake feed ends. A drain that the
// settled horizon held back below committed events is followed by another
// on a short backoff, or as soon as a Tx of this store ends, rather than at
// the safety poll: the transaction holding the horizon may end without a
// wake (see heldReport).
func (r *EventReceiver) run(cursor int64) {
	defer close(r.done)
	defer r.wakes.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
		case <-r.done:
		}
		cancel()
	}()
	ctx, held := withHeldReport(ctx)
	failing := false            // an error was surfaced and no read has worked since
	recheck := time.Duration(0) // the last wait while held back; 0 when not
	var run heldRun
	for {
		held.held = false
		mark := r.release.mark()
		next, err := r.drain(ctx, cursor)
		delivered := next != cursor
		cursor = next
		wait := time.Duration(0)
		var released <-chan struct{}
		if err != nil {
			if errors.Is(err, errStopped) || ctx.Err() != nil {
				r.finish(r.endCause())
				return
			}
			// Surface an outage once, then keep retrying quietly on wakes and
			// on the retry interval.
			if !failing && !r.send(item{err: err}) {
				r.finish(r.endCause())
				return
			}
			failing, wait = true, r.opts.RetryInterval
		} else {
			failing = false
		}
		if err == nil && held.held {
			hold, first := run.track(mark, true, delivered)
			recheck = nextRecheck(recheck)
			wait, released = min(recheck, r.opts.SafetyPoll), r.release.after(mark, hold, first)
			wake.HeldWaits(streamTopic(r.src.st.name))
		} else {
			run.track(mark, false, false)
			recheck = 0
		}
		if wait == 0 {
			wait = r.opts.SafetyPoll
		}
		if !r.park(wait, released) {
			r.finish(r.endCause())
			return
		}
		if isClosed(released) { // for tests: see wake.CountHeld
			wake.HeldReleased(streamTopic(r.src.st.name))
		}
	}
}

// drain reads pages from cursor until one short of both its bounds
// (PageSize and PageBytes: see pager), sending each event.
func (r *EventReceiver) drain(ctx context.Context, cursor int64) (int64, error) {
	for {
		evs, more, err := r.pages.read(ctx, r.src.st, cursor)
		if err != nil {
			return cursor, err
		}
		for _, ev := range evs {
			if !r.send(item{ev: ev}) {
				return cursor, errStopped
			}
			cursor = ev.Offset
		}
		if !more {
			return cursor, nil
		}
	}
}

// errStopped says a send gave up because the receiver is closing: it ends
// the reader and is never handed to the consumer.
var errStopped = errors.New("receiver stopping")

// endCause is why the reader ended: the feed's reason when it ended (the
// store closed, or SQLite's watcher died), else Close.
func (r *EventReceiver) endCause() error {
	select {
	case <-r.wakes.Done():
		return closedBy(r.wakes.Err())
	default:
		return ErrClosed
	}
}

// send blocks until the consumer takes room in the buffer or Close.
func (r *EventReceiver) send(it item) bool {
	select {
	case r.items <- it:
		return true
	case <-r.stop:
		return false
	case <-r.wakes.Done():
		return false
	}
}

// park waits for a wake, the retry timeout or released (true), or the end
// of the feed or Close (false).
func (r *EventReceiver) park(retry time.Duration, released <-chan struct{}) bool {
	var timeout <-chan time.Time
	if retry > 0 {
		t := time.NewTimer(retry)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-r.wakes.C():
		return true
	case <-timeout:
		return true
	case <-released:
		return true
	case <-r.wakes.Done():
		return false
	case <-r.stop:
		return false
	}
}

func (r *EventReceiver) finish(cause error) {
	if cause == nil {
		cause = ErrClosed
	}
	r.once.Do(func() {
		r.cause = cause
		close(r.closed)
	})
}

// Recv returns the next event, waiting for one. After the receiver closed
// (Close, the store closing, or on SQLite its watcher dying) it returns an
// error matching ErrClosed, for good, even while events are still buffered.
// Other errors are the database's: one when reads start failing, after which
// the receiver keeps retrying and resumes where it was once a read works
// again. Calling Recv marks the previous event finished (see SubscribeOpts).
func (r *EventReceiver) Recv(ctx context.Context) (Event, error) {
	if r.ended() {
		return Event{}, r.closedErr()
	}
	r.autoSave(ctx)
	select {
	case it := <-r.items:
		if !r.ended() { // a close that raced with this receive wins
			return r.yield(it)
		}
	case <-r.stop:
	case <-r.wakes.Done():
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
	r.ended()
	return Event{}, r.closedErr()
}

// TryRecv returns the next event if one is ready: ok is false when none is
// (and err is nil), or err matches ErrClosed once the receiver closed.
// Calling TryRecv marks the previous event finished (see SubscribeOpts).
func (r *EventReceiver) TryRecv(ctx context.Context) (ev Event, ok bool, err error) {
	if r.ended() {
		return Event{}, false, r.closedErr()
	}
	r.autoSave(ctx)
	select {
	case it := <-r.items:
		if r.ended() {
			return Event{}, false, r.closedErr()
		}
		ev, err = r.yield(it)
		return ev, err == nil, err
	default:
		return Event{}, false, nil
	}
}

// ended reports whether the receiver has closed, settling why the first
// time it notices: Close, or the end of the wake feed (the store closing).
// Recv and TryRecv ask it before and after taking from the buffer, so a
// closed receiver never hands out a buffered event.
func (r *EventReceiver) ended() bool {
	select {
	case <-r.closed:
		return true
	default:
	}
	select {
	case <-r.stop:
		r.finish(ErrClosed)
		return true
	default:
	}
	select {
	case <-r.wakes.Done():
		r.finish(closedBy(r.wakes.Err()))
		return true
	default:
	}
	return false
}

func (r *EventReceiver) closedErr() error {
	if errors.Is(r.cause, ErrClosed) {
		return r.cause
	}
	return errors.Join(ErrClosed, r.cause)
}

func (r *EventReceiver) yield(it item) (Event, error) {
	if it.err != nil {
		return Event{}, it.err
	}
	r.mu.Lock()
	r.position, r.pending = it.ev.Offset, true
	r.mu.Unlock()
	return it.ev, nil
}

// autoSave runs when the caller asks for the next event: the event yielded
// before is finished now, and the finished position is saved when due. It
// never saves the event about to be handed out.
func (r *EventReceiver) autoSave(ctx context.Context) {
	if r.opts.AutoSaveEvery <= 0 && r.opts.AutoSaveInterval <= 0 {
		return
	}
	r.mu.Lock()
	if r.pending {
		r.pending, r.finished = false, r.position
		r.unsaved++
	}
	pos := r.finished
	due := pos > r.saved &&
		((r.opts.AutoSaveEvery > 0 && r.unsaved >= r.opts.AutoSaveEvery) ||
			(r.opts.AutoSaveInterval > 0 && time.Since(r.lastSave) >= r.opts.AutoSaveInterval))
	r.mu.Unlock()
	if due {
		if err := r.save(ctx, pos); err != nil {
			r.opts.Logger.Warn("alkstore: receiver auto-save failed; the position will be saved again later", "error", err)
		}
	}
}

// Buffered is the number of events read ahead and waiting for Recv (at
// most SubscribeOpts.Buffer).
func (r *EventReceiver) Buffered() int { return len(r.items) }

// Position is the offset of the last event Recv or TryRecv returned; 0
// before the first.
func (r *EventReceiver) Position() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.position
}

// SaveOffset saves Position as the consumer's offset (monotone). Before the
// first event it does nothing: there is nothing to checkpoint. It never
// saves an event the caller was not given. On a receiver of Follow it
// fails with ErrInvalidArgument, before the first event too.
func (r *EventReceiver) SaveOffset(ctx context.Context) error {
	r.mu.Lock()
	pos := r.position
	r.mu.Unlock()
	return r.save(ctx, pos)
}

func (r *EventReceiver) save(ctx context.Context, pos int64) error {
	if pos == 0 { // a followed stream's refusal all the same (attack57 F4)
		return r.src.canSave()
	}
	if err := r.src.SaveOffset(ctx, pos); err != nil {
		return err
	}
	r.mu.Lock()
	r.saved = max(r.saved, pos)
	if r.finished <= pos {
		r.unsaved = 0
	}
	r.lastSave = time.Now()
	r.mu.Unlock()
	return nil
}

// Close stops the receiver and waits for its reader to end. Recv and
// TryRecv then return ErrClosed, even for events still buffered. Close does
// not save the position; call SaveOffset first if you want it saved. It
// always returns nil: the error result only makes an EventReceiver an
// io.Closer.
func (r *EventReceiver) Close() error {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
	r.finish(ErrClosed)
	if r.onClose != nil {
		r.closeHook.Do(r.onClose)
	}
	return nil
}
