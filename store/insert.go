package store

import (
	"context"
	"fmt"
	"maps"
	"time"
)

// InsertKind says what an insert adds: events or jobs.
type InsertKind string

const (
	InsertPublish InsertKind = "publish" // events: Publish, PublishWithKey, PublishMessage, PublishMany, typed topics, their Tx forms
	InsertEnqueue InsertKind = "enqueue" // jobs: Enqueue, EnqueueMany, EnqueueUnique..., typed queues, outboxes, their Tx forms
)

// Insert is one publish or enqueue call as insert middleware sees it.
type Insert struct {
	Kind InsertKind
	// Name is the stream's or the queue's name (an outbox's is its backing
	// queue's, OutboxQueuePrefix + the outbox's name).
	Name  string
	Batch bool // PublishMany, EnqueueMany and their unique and Tx forms
	// Tx says the insert runs inside the caller's transaction: it
	// commits or rolls back with it, after the middleware returned.
	Tx bool
	// Messages are the events or jobs, in order. Middleware may change a
	// message's Payload and Headers (see SetHeader) but not add or remove
	// messages.
	Messages []InsertMessage

	jobs []NewJob // the caller's jobs, for EnqueueMany and a unique Enqueue: their unique keys count in Size
}

// Size returns at least what MaxBatchSize counts for the batch, its
// messages as they are now: each message's payload, key and headers (as
// stored: StoredHeadersSize), a unique job's key, and BatchElementOverhead
// a message. It is exactly that but for an EnqueueMany whose jobs share
// their options (EnqueueMany's usual batch), whose headers count once.
// Middleware that adds headers to a batch keeps Size, once they are added,
// within MaxBatchSize, so that the store still takes a batch it takes
// without them. It encodes only headers that JSON escapes
// (StoredHeadersSize), and digests unique jobs' keys.
func (in *Insert) Size() int64 {
	var size int64
	for i := range in.Messages {
		m := &in.Messages[i]
		key := 0
		if m.Key != nil {
			key = len(*m.Key)
		}
		if i < len(in.jobs) && in.jobs[i].Opts.Unique.Key != "" {
			// The digest's and the states' length: neither depends on the time.
			k, states, err := uniqueColumns(in.Name, time.Time{}, in.jobs[i].Opts.Unique)
			if err == nil {
				key += len(k) + len(states)
			}
		}
		size = batchSize(size, len(m.Payload), key, StoredHeadersSize(m.Headers))
	}
	return size
}

// InsertMessage is one event or job of an Insert.
type InsertMessage struct {
	Key     *string // events: the key (read only); nil when unkeyed, and for jobs
	Payload []byte
	// Headers are the message's headers; they are validated (MaxHeadersSize)
	// after every middleware ran. Use SetHeader to add one: the map may be
	// the caller's, which the store never changes.
	Headers map[string]string
	// ID is set once the inner function returned nil: the event's offset,
	// or the job's id (for a unique job whose key was held, the holder's).
	ID int64

	owned bool // Headers is the store's copy
}

// SetHeader sets one header, copying the caller's map first.
func (m *InsertMessage) SetHeader(key, value string) {
	if !m.owned {
		h := make(map[string]string, len(m.Headers)+1)
		maps.Copy(h, m.Headers)
		m.Headers, m.owned = h, true
	}
	m.Headers[key] = value
}

// InsertFunc performs an insert: the next middleware, or the store's write.
type InsertFunc func(ctx context.Context, in *Insert) error

// InsertMiddleware wraps every publish and enqueue of a store, in every
// form (single, batch, unique, typed, outbox, Tx), beside the handler
// middleware of package client: it may act before and after the write
// (start a span, count, time it), set headers (inject trace context) and
// see the error. It runs after the handle's name is checked and before the
// payloads and headers are; the write's error, wrapped as every error of
// the operation, reaches the caller. Jobs that schedules fire do not pass
// through it (no caller is there to see them). An error a middleware
// returns after next succeeded does not undo the write: the job or event
// is stored (in a Tx, it commits with the transaction), and a caller that
// retries on that error writes it again.
type InsertMiddleware func(next InsertFunc) InsertFunc

// WithInsertMiddleware adds insert middleware, the first outermost.
func WithInsertMiddleware(mw ...InsertMiddleware) Option {
	return func(c *config) { c.insert = append(c.insert, mw...) }
}

// checkInsertMiddleware refuses nil middleware at Open.
func checkInsertMiddleware(mw []InsertMiddleware) error {
	for i, m := range mw {
		if m == nil {
			return opErr("open", "", fmt.Errorf("%w: insert middleware %d is nil", ErrInvalidArgument, i))
		}
	}
	return nil
}

// intercept runs inner through the store's insert middleware. The store
// calls it only when there is middleware: without, an insert builds no
// Insert at all.
func (s *Store) intercept(ctx context.Context, in *Insert, inner InsertFunc) error {
	n := len(in.Messages)
	h := func(ctx context.Context, in *Insert) error {
		if len(in.Messages) != n {
			return fmt.Errorf("%w: insert middleware changed the number of messages from %d to %d", ErrInvalidArgument, n, len(in.Messages))
		}
		return inner(ctx, in)
	}
	for i := len(s.insert) - 1; i >= 0; i-- {
		h = s.insert[i](h)
	}
	return h(ctx, in)
}
