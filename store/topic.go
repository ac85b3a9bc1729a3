package store

import (
	"context"
	"fmt"
)

// Topic is a typed view of a stream: messages are values of M, encoded and
// decoded with the store's codec. M may implement SchemaVersion() int
// (default 1), which is stored in its key's head.
type Topic[M any] struct {
	st *Stream
}

// Topic returns the typed view of the stream called name.
func (s *Store) Topic[M any](name string) *Topic[M] {
	return &Topic[M]{st: s.Stream(name)}
}

// Stream returns the untyped stream underneath.
func (t *Topic[M]) Stream() *Stream { return t.st }

// PublishOpts are a message's options: a Key makes it the key's head by the
// winner rule, at Rank (a lower rank never replaces a higher one; equal
// ranks: the later offset wins).
type PublishOpts struct {
	Key  string
	Rank int64
	// Headers ride with the event (Event.Headers; see Message.Headers).
	Headers map[string]string
}

// Publish publishes m. With a key, a nil m is a tombstone: it becomes the
// head and the key reads as deleted. A non-nil m is always a value: when
// the codec encodes it as a nil slice, an empty payload is stored.
func (t *Topic[M]) Publish(ctx context.Context, m *M, opts PublishOpts) (int64, error) {
	return t.publish(ctx, autoWrite(ctx), m, opts)
}

// PublishTx publishes m inside tx, so it commits with the transaction's
// other writes (typically after LockCompactionHeadTx on the same key).
func (t *Topic[M]) PublishTx(ctx context.Context, tx Tx, m *M, opts PublishOpts) (int64, error) {
	return t.publish(ctx, tx.via(ctx), m, opts)
}

func (t *Topic[M]) publish(ctx context.Context, v via, m *M, opts PublishOpts) (int64, error) {
	var payload []byte
	if m != nil {
		b, err := t.st.s.codec.Marshal(m)
		if err != nil {
			return 0, opErr("publish", t.st.name, fmt.Errorf("%w: %w", ErrCodec, err))
		}
		payload = b
		if payload == nil {
			// Only a nil m is a tombstone: a codec that encodes a value as
			// nil (a pass-through []byte codec given a nil slice) stores
			// an empty value (attack59 F5).
			payload = []byte{}
		}
	}
	if opts.Key == "" {
		if opts.Rank != 0 {
			return 0, opErr("publish", t.st.name, fmt.Errorf("%w: Rank %d without a Key (only keyed events compete for a head)", ErrInvalidArgument, opts.Rank))
		}
		if m == nil {
			return 0, opErr("publish", t.st.name, fmt.Errorf("%w: a nil message needs a key (it is a tombstone)", ErrInvalidArgument))
		}
		return t.st.publish(ctx, v, payload, opts.Headers)
	}
	return t.st.publishKeyed(ctx, v, opts.Key, payload, opts.Headers, opts.Rank, schemaVersion(m))
}

func schemaVersion[M any](m *M) int {
	if sv, ok := any(m).(interface{ SchemaVersion() int }); ok && m != nil {
		return sv.SchemaVersion()
	}
	var zero M
	if sv, ok := any(zero).(interface{ SchemaVersion() int }); ok {
		return sv.SchemaVersion()
	}
	return 1
}

// TopicKey is a typed handle on one key of a topic.
type TopicKey[M any] struct {
	t *Topic[M]
	k *Key
}

// Key returns the handle for key.
func (t *Topic[M]) Key(key string) *TopicKey[M] {
	return &TopicKey[M]{t: t, k: t.st.Key(key)}
}

// CompactionHead reads and decodes the key's current value; ErrNotFound
// when it has none (never published, headless, or a tombstone).
func (tk *TopicKey[M]) CompactionHead(ctx context.Context) (*M, error) {
	h, err := tk.k.CompactionHead(ctx)
	if err != nil {
		return nil, err
	}
	return tk.t.decode(h)
}

// LockCompactionHeadTx locks the key (see Key.LockCompactionHeadTx) and returns
// its decoded value, or nil when it has none.
func (tk *TopicKey[M]) LockCompactionHeadTx(ctx context.Context, tx Tx) (*M, error) {
	h, err := tk.k.LockCompactionHeadTx(ctx, tx)
	if err != nil || h == nil {
		return nil, err
	}
	return tk.t.decode(h)
}

// KeyValue is one key's current value.
type KeyValue[M any] struct {
	Key    string
	Offset int64
	Value  *M
}

// Heads lists current values in key order, starting after the key after
// (empty: from the first), at most limit of them; deleted keys are left out.
// A non-empty after must be a valid key (ErrInvalidName otherwise). limit
// <= 0 returns none and does no I/O.
func (t *Topic[M]) Heads(ctx context.Context, after string, limit int) ([]KeyValue[M], error) {
	heads, err := run(t.st.handle, "heads", autoRead, func(o target) ([]Head, error) {
		if after != "" {
			if err := validateKey(&after); err != nil {
				return nil, fmt.Errorf("after: %w", err)
			}
		}
		if limit <= 0 {
			return nil, nil
		}
		return o.listHeads(ctx, t.st.name, after, limit)
	})
	if err != nil {
		return nil, err
	}
	out := make([]KeyValue[M], len(heads))
	for i := range heads {
		v, err := t.decode(&heads[i])
		if err != nil {
			return nil, err
		}
		out[i] = KeyValue[M]{Key: heads[i].Key, Offset: heads[i].Offset, Value: v}
	}
	return out, nil
}

func (t *Topic[M]) decode(h *Head) (*M, error) {
	v := new(M)
	if err := t.st.s.codec.Unmarshal(h.Payload, v); err != nil {
		return nil, opErr("decode", t.st.name, fmt.Errorf("%w: key %q offset %d: %w", ErrCodec, h.Key, h.Offset, err))
	}
	return v, nil
}
