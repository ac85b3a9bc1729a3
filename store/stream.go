package store

import (
	"context"
	"fmt"
	"time"
)

// Stream is a handle on a durable, ordered stream of events with per-consumer
// offsets. Creating one does no I/O; a bad name is reported by every
// operation on the handle.
type Stream struct {
	handle
	topic string // its wake topic (streamTopic), built once: a publish cost two allocations building it
	// wakeFn wakes topic's waiters in this process (Store.wake), built
	// once: a publish in a transaction cost an allocation building it.
	wakeFn func()
}

// Stream returns the handle for the stream called name.
func (s *Store) Stream(name string) *Stream {
	topic := streamTopic(name)
	return &Stream{handle: newHandle(s, name), topic: topic, wakeFn: s.wake(topic)}
}

// Name returns the stream's name.
func (st *Stream) Name() string { return st.name }

// Store returns the store the stream belongs to.
func (st *Stream) Store() *Store { return st.s }

// Event is one stream event.
type Event struct {
	Offset    int64
	Stream    string
	Key       *string // nil for an unkeyed publish
	Payload   []byte  // as published: nil stays nil, empty stays empty (non-nil)
	CreatedAt time.Time
	Headers   map[string]string // as published (Message.Headers); nil when none
}

// Message is one event to publish with PublishMany.
type Message struct {
	Key     *string // nil: unkeyed; a set key must be a valid key (1 to MaxKeyLen bytes of UTF-8, no control characters)
	Payload []byte  // nil with a key is a tombstone; empty is a value
	// Headers ride with the event (Event.Headers): at most MaxHeadersSize
	// bytes of keys and values; nil or empty stores none.
	Headers map[string]string
}

// Publish appends an unkeyed event and returns its offset.
func (st *Stream) Publish(ctx context.Context, payload []byte) (int64, error) {
	return st.publish(ctx, autoWrite(ctx), payload, nil)
}

// PublishTx is Publish inside tx: the event commits or rolls back with it.
func (st *Stream) PublishTx(ctx context.Context, tx Tx, payload []byte) (int64, error) {
	return st.publish(ctx, tx.via(ctx), payload, nil)
}

// PublishMessage appends one message: unkeyed like Publish, or keyed like
// PublishWithKey, with its headers (Event.Headers on read).
func (st *Stream) PublishMessage(ctx context.Context, m Message) (int64, error) {
	return st.publishMessage(ctx, autoWrite(ctx), m)
}

// PublishMessageTx is PublishMessage inside tx.
func (st *Stream) PublishMessageTx(ctx context.Context, tx Tx, m Message) (int64, error) {
	return st.publishMessage(ctx, tx.via(ctx), m)
}

func (st *Stream) publishMessage(ctx context.Context, v via, m Message) (int64, error) {
	if m.Key == nil {
		return st.publish(ctx, v, m.Payload, m.Headers)
	}
	return st.publishKeyed(ctx, v, *m.Key, m.Payload, m.Headers, 0, 1)
}

// PublishWithKey appends an event carrying key and makes it the key's
// compaction head by the winner rule (rank 0). A nil payload is a
// tombstone; an empty, non-nil one is a value. A key that is not 1 to
// MaxKeyLen bytes of valid UTF-8 without control characters is
// ErrInvalidName.
func (st *Stream) PublishWithKey(ctx context.Context, key string, payload []byte) (int64, error) {
	return st.publishKeyed(ctx, autoWrite(ctx), key, payload, nil, 0, 1)
}

// PublishWithKeyTx is PublishWithKey inside tx. On PostgreSQL the key's
// head row stays locked until tx ends: a transaction that publishes several
// keys should publish them in key order (as one PublishManyTx does), or two
// such transactions can deadlock (SQLSTATE 40P01).
func (st *Stream) PublishWithKeyTx(ctx context.Context, tx Tx, key string, payload []byte) (int64, error) {
	return st.publishKeyed(ctx, tx.via(ctx), key, payload, nil, 0, 1)
}

func (st *Stream) publish(ctx context.Context, v via, payload []byte, headers map[string]string) (int64, error) {
	return run(st.handle, "publish", v, func(o target) (int64, error) {
		if st.s.insert == nil {
			return st.publishOne(ctx, o, payload, headers)
		}
		return st.interceptOne(ctx, o, nil, payload, headers, func(ctx context.Context, m *InsertMessage) (int64, error) {
			return st.publishOne(ctx, o, m.Payload, m.Headers)
		})
	})
}

func (st *Stream) publishOne(ctx context.Context, o target, payload []byte, headers map[string]string) (int64, error) {
	if err := st.s.checkPayload("payload", payload); err != nil {
		return 0, err
	}
	hs, err := checkHeaders(headers)
	if err != nil {
		return 0, err
	}
	off, err := o.publish(ctx, publishReq{stream: st.name, topic: st.topic, payload: payload, headers: hs})
	o.wakeAfter(st, err)
	return off, err
}

// interceptOne runs a single publish through the insert middleware.
func (st *Stream) interceptOne(ctx context.Context, o target, key *string, payload []byte, headers map[string]string,
	publish func(ctx context.Context, m *InsertMessage) (int64, error)) (int64, error) {
	in := &Insert{Kind: InsertPublish, Name: st.name, Tx: !o.auto,
		Messages: []InsertMessage{{Key: key, Payload: payload, Headers: headers}}}
	err := st.s.intercept(ctx, in, func(ctx context.Context, in *Insert) error {
		m := &in.Messages[0]
		var err error
		m.ID, err = publish(ctx, m)
		return err
	})
	return in.Messages[0].ID, err
}

// PublishMany appends msgs in order, in one statement on PostgreSQL (keyed
// heads included; one transaction on SQLite), and returns their offsets in
// the same order. All or none are stored (a batch an application's trigger
// shortened fails with ErrNotStored and stores none, as EnqueueMany). Keyed messages update
// their keys' compaction heads (rank 0) like PublishWithKey. An empty
// batch (nil or no messages) stores nothing, does no I/O and returns an
// empty slice; insert middleware does not see it.
func (st *Stream) PublishMany(ctx context.Context, msgs []Message) ([]int64, error) {
	return st.publishMany(ctx, autoWrite(ctx), msgs)
}

// PublishManyTx is PublishMany inside tx, all or none there too: a batch
// that fails leaves none of its events (and moves no head) in tx. On SQLite
// a batch of more than one message (or of one keyed message: the event, then
// its head) runs after a savepoint and rolls back to it, and tx goes on; on
// PostgreSQL a batch is one statement, which fails whole and, like any
// failed statement, aborts tx: only Rollback is left. A batch cut short by
// its ctx leaves nothing of it in tx and ends tx when the ctx ended while a
// statement ran, as EnqueueManyTx says. Portable code rolls tx back after
// an error.
func (st *Stream) PublishManyTx(ctx context.Context, tx Tx, msgs []Message) ([]int64, error) {
	return st.publishMany(ctx, tx.via(ctx), msgs)
}

func (st *Stream) publishMany(ctx context.Context, v via, msgs []Message) ([]int64, error) {
	return run(st.handle, "publish many", v, func(o target) ([]int64, error) {
		if len(msgs) == 0 {
			return []int64{}, nil // nothing to write, nothing to intercept
		}
		if st.s.insert == nil {
			return st.publishBatch(ctx, o, msgs)
		}
		in := &Insert{Kind: InsertPublish, Name: st.name, Batch: true, Tx: !o.auto, Messages: make([]InsertMessage, len(msgs))}
		for i, m := range msgs {
			in.Messages[i] = InsertMessage{Key: m.Key, Payload: m.Payload, Headers: m.Headers}
		}
		var offs []int64
		err := st.s.intercept(ctx, in, func(ctx context.Context, in *Insert) error {
			mine := make([]Message, len(in.Messages))
			for i, m := range in.Messages {
				mine[i] = Message{Key: msgs[i].Key, Payload: m.Payload, Headers: m.Headers}
			}
			var err error
			if offs, err = st.publishBatch(ctx, o, mine); err != nil {
				return err
			}
			for i, off := range offs {
				in.Messages[i].ID = off
			}
			return nil
		})
		return offs, err
	})
}

func (st *Stream) publishBatch(ctx context.Context, o target, msgs []Message) ([]int64, error) {
	var hs [][]byte // nil when no message has headers
	var size int64
	for i := range msgs {
		if err := validateKey(msgs[i].Key); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if err := st.s.checkPayloadAt("message", i, msgs[i].Payload); err != nil {
			return nil, err
		}
		if len(msgs[i].Headers) > 0 {
			h, err := headersFor("message", i, true, msgs[i].Headers)
			if err != nil {
				return nil, err
			}
			if hs == nil {
				hs = make([][]byte, len(msgs))
			}
			hs[i] = h
		}
		key, headers := 0, 0
		if msgs[i].Key != nil {
			key = len(*msgs[i].Key)
		}
		if hs != nil {
			headers = len(hs[i])
		}
		size = batchSize(size, len(msgs[i].Payload), key, headers)
	}
	if err := checkBatchSize("messages", len(msgs), size); err != nil {
		return nil, err
	}
	offs, err := o.publishMany(ctx, publishManyReq{stream: st.name, msgs: msgs, headers: hs, now: st.s.now()})
	o.wakeAfter(st, err)
	return offs, err
}

// ReadSince returns up to limit events with an offset above after, in offset
// order. It never returns an event past one that may still commit (see
// docs/design/stream-horizon.md), so a reader that resumes from the last
// offset it saw never skips an event. limit <= 0 returns no events and does
// no I/O. The page is bounded by limit alone, not in bytes: up to limit
// events of up to MaxPayloadSize each. A reader of large events picks
// limit by their size, or reads through a receiver (Subscribe, Follow),
// whose pages are bounded in bytes too (SubscribeOpts.PageBytes).
func (st *Stream) ReadSince(ctx context.Context, after int64, limit int) ([]Event, error) {
	return st.readSince(ctx, autoRead, after, limit)
}

// ReadSinceTx is ReadSince inside tx; it also sees the events tx published,
// and every event visible to tx below its last one in the stream (so that
// offset, saved as a consumer's, skips no committed event). Read before you
// write: on PostgreSQL a tx that has written (to any stream) sees others'
// events only up to the horizon proven before it took its transaction id,
// and an event another transaction still has in flight below tx's own
// offset is missing from the page (see docs/design/stream-horizon.md).
func (st *Stream) ReadSinceTx(ctx context.Context, tx Tx, after int64, limit int) ([]Event, error) {
	return st.readSince(ctx, tx.via(ctx), after, limit)
}

func (st *Stream) readSince(ctx context.Context, v via, after int64, limit int) ([]Event, error) {
	return run(st.handle, "read since", v, func(o target) ([]Event, error) {
		if limit <= 0 {
			return []Event{}, nil
		}
		return o.readSince(ctx, st.name, after, limit)
	})
}

// ReadFromConsumer reads like ReadSince from consumer's stored offset,
// its page bounded by limit alone as ReadSince's.
// limit <= 0 returns no events and does no I/O (the consumer's name is
// still checked).
func (st *Stream) ReadFromConsumer(ctx context.Context, consumer string, limit int) ([]Event, error) {
	return st.readFromConsumer(ctx, autoRead, consumer, limit)
}

// ReadFromConsumerTx is ReadFromConsumer inside tx, with ReadSinceTx's
// view: tx's own events and every event visible to it below them. Read
// before you write: on PostgreSQL a tx that has written sees others' events
// only up to the horizon proven before it took its transaction id (a tx that
// published to another stream first may read nothing of this one).
func (st *Stream) ReadFromConsumerTx(ctx context.Context, tx Tx, consumer string, limit int) ([]Event, error) {
	return st.readFromConsumer(ctx, tx.via(ctx), consumer, limit)
}

func (st *Stream) readFromConsumer(ctx context.Context, v via, consumer string, limit int) ([]Event, error) {
	return run(st.handle, "read from consumer", v, func(o target) ([]Event, error) {
		if err := validateLocalName("consumer", consumer); err != nil {
			return nil, err
		}
		if limit <= 0 {
			return []Event{}, nil
		}
		return o.readFromConsumer(ctx, st.name, consumer, limit)
	})
}

// SaveOffset records that consumer has processed every event up to offset.
// Offsets only move forward: saving a lower offset is a silent no-op. An
// offset above the newest one any event has been given (offsets are
// numbered across all streams) is refused with ErrInvalidArgument naming
// the consumer and both offsets: no event has it yet, and the consumer
// would skip the stream's events published until the numbering passed
// it. An offset a reader was given is never refused, even once its event
// is trimmed (on PostgreSQL, but for an event imported above the offset
// sequence, a table copied without it: SaveOffset of its offset is
// refused once no event is left at or above it, though an EventReceiver's
// save of it is taken; after an import, setval the sequence past it). An
// offset no reader was given (another stream's, or
// Store.Horizon's Head) may skip events: on SQLite none between the
// stream's last event and that bound (the stream's next event is numbered
// above it), on PostgreSQL any a transaction drew below it and commits
// later; only Store.Horizon's Settled skips none there (see ResetOffset).
// A save that stores nothing (a lower or equal save) costs a second
// statement, to tell it from a refusal.
func (st *Stream) SaveOffset(ctx context.Context, consumer string, offset int64) error {
	return st.saveOffset(ctx, autoWrite(ctx), consumer, offset, false)
}

// SaveOffsetTx is SaveOffset inside tx, so processing and offset commit
// together.
func (st *Stream) SaveOffsetTx(ctx context.Context, tx Tx, consumer string, offset int64) error {
	return st.saveOffset(ctx, tx.via(ctx), consumer, offset, false)
}

// saveOffset is SaveOffset; given: offset is an event's a reader was given
// (a receiver's position), so a save that stores nothing is a lower or
// equal save, no refusal, and needs no second statement to tell.
func (st *Stream) saveOffset(ctx context.Context, v via, consumer string, offset int64, given bool) error {
	return run0(st.handle, "save offset", v, func(o target) error {
		if err := validateLocalName("consumer", consumer); err != nil {
			return err
		}
		if offset < 0 {
			return fmt.Errorf("%w: negative offset %d", ErrInvalidArgument, offset)
		}
		return storeOffset(ctx, o, st.name, consumer, offset, false, given)
	})
}

// offsetBounds is why a save or reset of an offset stored nothing.
type offsetBounds struct {
	committed int64 // the consumer's stored offset, -1 when it has none
	newest    int64 // the newest offset drawn for any event: the bound; -1 when the role may not read it (PostgreSQL)
}

// storeOffset runs a save or a reset, whose statement checks the bound
// itself, so a save that moves the offset is one statement (the receivers'
// auto-save path). given: the offset is an event's a reader was given, so
// the bound is raised to it (acceptUpto: it may be above the sequence, an
// imported row's, and its event trimmed since) and nothing stored is a
// lower or equal save: no second statement. Otherwise, only when it
// stored nothing does offsetBounds tell why: a save that did not move the
// offset; an offset past the newest, refused unless an event has an id at
// or above it (a row imported without the sequence, which firstEventFrom
// looks for: the statement goes again with the bound raised to the
// offset); or an event that drew the offset between the two statements,
// which makes it write again (the bound only grows, so the second write
// does not fail on it).
func storeOffset(ctx context.Context, o target, stream, consumer string, offset int64, reset, given bool) error {
	var acceptUpto int64
	if given {
		acceptUpto = offset
	}
	for range 3 {
		var stored bool
		var err error
		if reset {
			stored, err = o.resetOffset(ctx, stream, consumer, offset, acceptUpto)
		} else {
			stored, err = o.saveOffset(ctx, stream, consumer, offset, acceptUpto)
		}
		if err != nil || stored || given && !reset {
			return err
		}
		b, err := o.offsetBounds(ctx, stream, consumer)
		switch {
		case err != nil:
			return err
		case !reset && offset <= b.committed:
			return nil // a lower save, a no-op whatever the bound (an offset stored before the bound existed may be past it)
		case b.newest < 0:
			return fmt.Errorf("%w: consumer %q: offset %d not checked: this role may not read alkstore.event_offset_seq (grant it USAGE or SELECT on the sequence)",
				ErrInvalidArgument, consumer, offset)
		case offset > b.newest:
			// An event imported above the sequence may have an id at or
			// above it (read only now: it names the events table).
			top, err := o.firstEventFrom(ctx, offset)
			if err != nil {
				return err
			}
			if top == 0 {
				return fmt.Errorf("%w: consumer %q: offset %d is past %d, the newest offset of any event (offsets are numbered across streams), and no event has an id at or above it: it would skip the stream's next events",
					ErrInvalidArgument, consumer, offset, b.newest)
			}
			acceptUpto = offset
		}
	}
	return fmt.Errorf("consumer %q: offset %d not stored: the consumer's offset kept changing", consumer, offset)
}

// ResetOffset sets consumer's stored offset to offset, lower or higher than
// before: a deliberate rewind (to replay events) or skip, unlike the
// monotone SaveOffset. A consumer running meanwhile may save its own
// offset over it; stop it first. 0 replays from the first event. An
// offset past the newest offset of any event is refused as SaveOffset
// refuses it (ErrInvalidArgument naming both offsets). Any stream name is
// accepted, one nothing was published to yet included (a consumer placed
// at deploy time, before the first publish); Exists tells whether
// anything of a stream is stored (the CLI and console refuse to reset a
// stream that does not exist, where a typo would make a consumer of a
// stream nobody writes). To skip to the end, reset to Store.Horizon's
// Settled: on PostgreSQL an offset above it (the stream's last event's,
// for one) may pass an event a transaction drew below it and commits
// later.
func (st *Stream) ResetOffset(ctx context.Context, consumer string, offset int64) error {
	return run0(st.handle, "reset offset", autoWrite(ctx), func(o target) error {
		if err := validateLocalName("consumer", consumer); err != nil {
			return err
		}
		if offset < 0 {
			return fmt.Errorf("%w: negative offset %d", ErrInvalidArgument, offset)
		}
		return storeOffset(ctx, o, st.name, consumer, offset, true, false)
	})
}

// Exists reports whether anything of the stream is stored: an event, a
// key's head (headless ones too), settings (Configure), a consumer's
// offset or a consumer group. A name alone is nothing: Store.Stream does
// no I/O, and a stream is made by its first write.
func (st *Stream) Exists(ctx context.Context) (bool, error) {
	return run(st.handle, "exists", autoRead, func(o target) (bool, error) {
		return o.streamExists(ctx, st.name)
	})
}

// Offset returns consumer's stored offset, 0 for an unknown consumer.
func (st *Stream) Offset(ctx context.Context, consumer string) (int64, error) {
	return st.getOffset(ctx, autoRead, consumer)
}

// OffsetTx is Offset inside tx.
func (st *Stream) OffsetTx(ctx context.Context, tx Tx, consumer string) (int64, error) {
	return st.getOffset(ctx, tx.via(ctx), consumer)
}

func (st *Stream) getOffset(ctx context.Context, v via, consumer string) (int64, error) {
	return run(st.handle, "offset", v, func(o target) (int64, error) {
		if err := validateLocalName("consumer", consumer); err != nil {
			return 0, err
		}
		return o.getOffset(ctx, st.name, consumer)
	})
}

// TrimTo deletes every event with an offset <= horizon and returns how many
// it deleted; on a compacted stream the current heads are spared. On any
// other stream a key whose head it deletes becomes headless: the key reads
// as having no value until its next publish, which becomes the head
// whatever its rank; a version of the key that lost to the deleted head
// (a lower rank, after it) stays in the log, and compaction deletes it
// once the stream is Compacted (a key without a head has no value).
// Surviving events keep their offsets; saved consumer
// offsets stay valid. A negative horizon deletes nothing. On PostgreSQL it
// drops whole event partitions where it can (see
// Maintenance.DropExpiredPartitions); on an error it still counts the
// events of the partitions it dropped before it (each drop commits on its
// own).
func (st *Stream) TrimTo(ctx context.Context, horizon int64) (int64, error) {
	var gone int64 // counted outside run, which returns 0 with an error
	_, err := run(st.handle, "trim", autoWrite(ctx), func(o target) (int64, error) {
		if horizon < 0 {
			return 0, nil
		}
		// On PostgreSQL, partitions holding nothing but trimmed or expired
		// events go whole; the rows of the others are deleted one by one
		// (in one transaction: none counted if it fails).
		now := st.s.now()
		_, dropped, err := o.dropExpiredPartitions(ctx, now, st.name, horizon)
		gone = dropped
		if err != nil {
			return dropped, err
		}
		n, err := o.trim(ctx, st.name, horizon, now)
		if err == nil {
			gone += n
		}
		return gone, err
	})
	return gone, err
}

// Subscribe returns a receiver that replays consumer's events from its
// saved offset, then delivers new ones as they commit, in offset order,
// without polling. It attaches to the wake feed before its first read, so
// no commit falls between. Close it when done; closing the store closes it.
// ctx bounds Subscribe's own work (reading the saved offset), not the
// receiver: ending it later ends no Recv; each Recv takes its own context.
func (st *Stream) Subscribe(ctx context.Context, consumer string, opts SubscribeOpts) (*EventReceiver, error) {
	return run(st.handle, "subscribe", autoRead, func(o target) (*EventReceiver, error) {
		if err := validateLocalName("consumer", consumer); err != nil {
			return nil, err
		}
		if err := opts.check(); err != nil {
			return nil, err
		}
		key := new(int)
		opts.Logger = st.s.logger(opts.Logger)
		r, err := newEventReceiver(ctx, streamSource{st: st, consumer: consumer}, st.s.subscribe(streamTopic(st.name)), opts,
			func() { st.s.bg.remove(key) })
		if err != nil {
			return nil, err
		}
		if !st.s.bg.add(key, r.Close) {
			_ = r.Close()
			return nil, ErrClosed
		}
		return r, nil
	})
}

// Follow returns a receiver like Subscribe's that starts after offset
// after instead of at a consumer's saved offset, and belongs to no
// consumer: it saves nothing (SaveOffset fails with ErrInvalidArgument, and
// AutoSave options must stay off). A tail of the stream (alkstore's
// `streams tail --follow`, a console) reads with it; after = 0 replays the
// whole stream.
func (st *Stream) Follow(ctx context.Context, after int64, opts SubscribeOpts) (*EventReceiver, error) {
	return run(st.handle, "follow", autoRead, func(o target) (*EventReceiver, error) {
		switch {
		case after < 0:
			return nil, fmt.Errorf("%w: negative offset %d", ErrInvalidArgument, after)
		case opts.AutoSaveEvery != 0 || opts.AutoSaveInterval != 0:
			return nil, fmt.Errorf("%w: a followed stream has no consumer to save offsets for", ErrInvalidArgument)
		}
		if err := opts.check(); err != nil {
			return nil, err
		}
		key := new(int)
		opts.Logger = st.s.logger(opts.Logger)
		r, err := newEventReceiver(ctx, streamSource{st: st, from: &after}, st.s.subscribe(streamTopic(st.name)), opts,
			func() { st.s.bg.remove(key) })
		if err != nil {
			return nil, err
		}
		if !st.s.bg.add(key, r.Close) {
			_ = r.Close()
			return nil, ErrClosed
		}
		return r, nil
	})
}

// Heads lists the stream's current compaction heads in key order after
// key after ("" for the first), up to limit, payloads raw (Topic.Heads
// decodes them); headless keys and deleted keys (whose head is a
// tombstone) are left out, so every listed head has a value: a non-nil
// Payload, empty for an empty value. limit <= 0 returns none and does no
// I/O (a non-empty after is still checked).
func (st *Stream) Heads(ctx context.Context, after string, limit int) ([]Head, error) {
	return run(st.handle, "heads", autoRead, func(o target) ([]Head, error) {
		if after != "" {
			if err := validateKey(&after); err != nil {
				return nil, fmt.Errorf("after: %w", err)
			}
		}
		if limit <= 0 {
			return []Head{}, nil
		}
		return o.listHeads(ctx, st.name, after, limit)
	})
}

// streamSource is one consumer's view of a stream, for its receiver, or
// (from set, no consumer) a tail's view from a given offset.
type streamSource struct {
	st       *Stream
	consumer string
	from     *int64
}

func (src streamSource) Offset(ctx context.Context) (int64, error) {
	if src.from != nil {
		return *src.from, nil
	}
	return src.st.Offset(ctx, src.consumer)
}

func (src streamSource) SaveOffset(ctx context.Context, offset int64) error {
	if err := src.canSave(); err != nil {
		return err
	}
	return src.st.saveOffset(ctx, autoWrite(ctx), src.consumer, offset, true) // a position Recv returned
}

// canSave refuses a save for a followed stream, which has no consumer.
func (src streamSource) canSave() error {
	if src.from != nil { // an OpError naming the stream, as every store error (attack56b F8)
		return opErr("save offset", src.st.name, fmt.Errorf("%w: a followed stream has no consumer to save an offset for", ErrInvalidArgument))
	}
	return nil
}
