package store

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

// Head is the current value of a key in a stream: the event that won the
// key by the winner rule (a headless row, or a greater (rank, offset)).
type Head struct {
	Key           string
	Offset        int64
	Payload       []byte // nil for a tombstone (CompactionHead returns one with ErrNotFound; Heads leaves them out); an empty, non-nil payload is a value
	SchemaVersion int
	Rank          int64
	UpdatedAt     time.Time
}

// Key is a handle on one key of a stream: its compaction head.
type Key struct {
	st  *Stream
	key string
}

// Key returns the handle for key. Creating it does no I/O; an empty key is
// reported by its operations.
func (st *Stream) Key(key string) *Key { return &Key{st: st, key: key} }

// CompactionHead reads the key's current head. ErrNotFound when the key has
// no head: never published, only locked (headless), or deleted (its head
// is a tombstone).
func (k *Key) CompactionHead(ctx context.Context) (*Head, error) {
	return run(k.st.handle, "compaction head", autoRead, func(o target) (*Head, error) {
		if err := validateKey(&k.key); err != nil {
			return nil, err
		}
		h, err := o.getHead(ctx, k.st.name, k.key)
		if err == nil && h.Payload == nil {
			err = fmt.Errorf("key %q: tombstone: %w", k.key, ErrNotFound)
		}
		return h, err
	})
}

// maxLockAttempts bounds the lock loop: each lost insert race costs one
// more round; only a transaction that cannot see committed rows (REPEATABLE
// READ or SERIALIZABLE on Postgres) could lose forever.
const maxLockAttempts = 16

// LockCompactionHeadTx ensures the key has a row and locks it until tx ends,
// so a read-modify-publish on the key composes with every other writer of
// it, even for a key that has no value yet. It returns the current head,
// or nil when the row is headless or the head is a tombstone. The protocol:
// select the row FOR UPDATE; when absent insert a headless row ON CONFLICT
// DO NOTHING and select again (a lost insert race waits for the winner); a
// found headless row has its updated_at refreshed under the lock. On SQLite
// the writer slot that tx holds gives the same serialization.
func (k *Key) LockCompactionHeadTx(ctx context.Context, tx Tx) (*Head, error) {
	return run(k.st.handle, "lock compaction head", tx.via(ctx), func(o target) (*Head, error) {
		if err := validateKey(&k.key); err != nil {
			return nil, err
		}
		for range maxLockAttempts {
			now := k.st.s.now()
			row, err := o.lockHead(ctx, k.st.name, k.key)
			switch {
			case err != nil:
				return nil, err
			case row == nil: // no row yet: insert a headless one and look again
				if err := o.insertHeadless(ctx, k.st.name, k.key, now); err != nil {
					return nil, err
				}
				continue
			case row.offset == nil:
				return nil, o.touchHeadless(ctx, k.st.name, k.key, now)
			}
			// Read under the lock, in a statement of its own (see the
			// LockCompactionHeadTx query on why it is not a join).
			payload, found, err := o.eventPayload(ctx, *row.offset)
			if err != nil || !found || payload == nil {
				return nil, err // trimmed, or a tombstone: the key has no value
			}
			return &Head{Key: k.key, Offset: *row.offset, Payload: payload, SchemaVersion: row.schemaVersion,
				Rank: row.rank, UpdatedAt: row.updatedAt}, nil
		}
		return nil, fmt.Errorf("key %q: the key row stayed invisible to this transaction (use READ COMMITTED)", k.key)
	})
}

// StreamConfig is a stream's stored settings. Zero durations take the
// defaults.
type StreamConfig struct {
	Compacted          bool          // retention and TrimTo spare current heads; the janitor compacts
	HeadlessTTL        time.Duration // how long an unused headless row lives; default 1h
	Retention          time.Duration // events older than this are deleted (compacted: heads spared); 0: forever
	MinCompactionLag   time.Duration // superseded events younger than this are kept
	TombstoneRetention time.Duration // how long a tombstone head stays at least (and until compaction walked past it); default 24h
}

// Defaults for StreamConfig.
const (
	DefaultHeadlessTTL        = time.Hour
	DefaultTombstoneRetention = 24 * time.Hour
)

// Configure stores the stream's settings (replacing earlier ones). A
// duration that is negative, or positive but under 1µs (durations are
// stored in whole microseconds: a remainder below 1µs is dropped), is
// refused with ErrInvalidArgument.
func (st *Stream) Configure(ctx context.Context, c StreamConfig) error {
	return run0(st.handle, "configure", autoWrite(ctx), func(o target) error {
		for _, d := range []struct {
			field string
			d     time.Duration
		}{{"HeadlessTTL", c.HeadlessTTL}, {"Retention", c.Retention}, {"MinCompactionLag", c.MinCompactionLag}, {"TombstoneRetention", c.TombstoneRetention}} {
			if err := checkMicros("StreamConfig."+d.field, d.d); err != nil {
				return err
			}
		}
		c.HeadlessTTL = cmp.Or(c.HeadlessTTL, DefaultHeadlessTTL)
		c.TombstoneRetention = cmp.Or(c.TombstoneRetention, DefaultTombstoneRetention)
		return o.configureStream(ctx, st.name, c)
	})
}

// publishKeyed appends a keyed event and upserts its key's head.
func (st *Stream) publishKeyed(ctx context.Context, v via, key string, payload []byte, headers map[string]string, rank int64, schemaVersion int) (int64, error) {
	return run(st.handle, "publish", v, func(o target) (int64, error) {
		if st.s.insert == nil {
			return st.publishKeyedOne(ctx, o, key, payload, headers, rank, schemaVersion)
		}
		k := key // the middleware's pointer: only an intercepted publish moves the key to the heap
		return st.interceptOne(ctx, o, &k, payload, headers, func(ctx context.Context, m *InsertMessage) (int64, error) {
			return st.publishKeyedOne(ctx, o, k, m.Payload, m.Headers, rank, schemaVersion)
		})
	})
}

func (st *Stream) publishKeyedOne(ctx context.Context, o target, key string, payload []byte, headers map[string]string, rank int64, schemaVersion int) (int64, error) {
	if err := validateKey(&key); err != nil {
		return 0, err
	}
	if err := st.s.checkPayload("payload", payload); err != nil {
		return 0, err
	}
	hs, err := checkHeaders(headers)
	if err != nil {
		return 0, err
	}
	off, err := o.publishKeyed(ctx, keyedEvent{stream: st.name, topic: st.topic, key: key, payload: payload, headers: hs, rank: rank,
		schemaVersion: int32(schemaVersion), now: st.s.now()})
	o.wakeAfter(st, err)
	return off, err
}

// headRow is a locked compaction head row; offset is nil when headless.
type headRow struct {
	offset        *int64
	schemaVersion int
	rank          int64
	updatedAt     time.Time
}

type keyedEvent struct {
	stream, key   string
	topic         string // the stream's wake topic (Stream.topic), not built again a publish
	payload       []byte
	headers       []byte // stored form; nil for none
	rank          int64
	schemaVersion int32
	now           time.Time
}
