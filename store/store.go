// Package store is alkstore's contract: Open a Store on SQLite or PostgreSQL,
// then use its queues, streams (with consumer offsets, consumer groups and
// compacted keys), notifications, schedules and transactional outbox, alone
// or inside the same transaction as the application's own rows. Shutdown (or
// Close) stops everything the store runs, in order.
//
// Names follow one rule. A handle constructor is named after the type it
// returns (Store.Queue → *Queue, Store.Schedule → *Schedule, Store.JobQueue[T]
// → *JobQueue[T], Store.Topic[M] → *Topic[M]); handles do no I/O and never
// fail, and Store itself keeps only what is store-wide. Every operation that
// runs in the caller's transaction takes the Tx as its second argument and
// ends in Tx (PublishTx, EnqueueTx, SetTx, LockCompactionHeadTx); without the
// suffix it commits on its own. One verb names one act: Publish for streams
// and topics, Enqueue for queues and outboxes, …Many for batches, and reads
// are named after what they return, without Get (Queue.Job, Stream.Offset).
// Settings are passed as an …Opts struct (WorkOpts, PublishOpts,
// SchedulerOpts), never set as exported fields; only Open and OpenPool take Options.
// Settings stored in the database are a …Config struct written by Configure
// (StreamConfig, QueueConfig). Cleanup passes are methods of Maintenance.
//
// A job is pending or running until it ends completed, cancelled, expired or
// dead (JobState), with its FinishedAt and every attempt's error (Job.Errors,
// the last MaxAttemptErrors). An acked job is deleted unless its queue keeps
// completed jobs; finished jobs stay as long as their queue's QueueConfig
// says, and the janitor (Maintenance.DeleteFinishedJobs) deletes them after.
// Consoles page a queue's jobs by state (Queue.Jobs), delete or requeue them
// (Queue.Delete, Queue.Requeue, Queue.RequeueDead), list queues
// (Store.Queues) and rewind consumers (Stream.ResetOffset).
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	dsnform "github.com/alkstore/alkstore/internal/dsn"
	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/internal/wake"
)

// Store is an open alkstore database. It is safe for concurrent use.
type Store struct {
	eng        engine
	log        *slog.Logger
	codec      Codec
	secrets    dsnform.Set // the DSN's password and its pieces (dsnform.Secrets), scrubbed from every error and log line
	clock      func() time.Time
	maxPayload int
	insert     []InsertMiddleware // nil: inserts build no Insert
	hub        *wake.Hub          // wakes and notifications for this store's waiters
	feed       feed
	bg         background
	life       *lifecycle
	held       horizonRelease // wakes receivers held back by the horizon when a Tx ends
	closeOnce  sync.Once
	deniedLog  sync.Once // partitions denied to this role: logged once
	closeErr   error     // what the first Shutdown returned
	registered sync.Map  // queue names whose settings row this store has committed (Queue.register)
	tombFrom   sync.Map  // stream name → tombPos: where this store's next tombstone pass starts (expireTombstones)
	// compactHeld: the compacted streams whose cursor this store's passes
	// kept for held versions (CompactSuperseded, compaction_held.go).
	compactHeld heldCompactions
	// holds: on SQLite, the running workers whose claims a transactional
	// handler holding the writer extends (runner.holdOthers).
	holds writerHolds
}

// Option configures Open and OpenPool.
type Option func(*config)

type config struct {
	migrate     bool
	log         *slog.Logger
	codec       Codec
	readConns   int
	maxConns    int
	maxConnsSet bool // WithMaxConns given: 0 is refused, not the default
	clock       func() time.Time
	maxPayload  int
	// stallWarning: see WithHorizonStallWarning.
	stallWarning time.Duration
	insert       []InsertMiddleware
	secrets      dsnform.Set // Open's DSN's (dsnform.Secrets), for the store's errors
}

// WithoutMigrate turns auto-migration off: Open then only checks that the
// database's schema is at this library's version and fails with
// ErrSchemaVersion when it is not: older (apply schema/ with goose first)
// or newer (a newer alkstore migrated it: upgrade this one; an
// auto-migrating Open accepts a newer schema). The error says which.
func WithoutMigrate() Option { return func(c *config) { c.migrate = false } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithCodec sets the codec typed views use to encode payloads (default, or
// nil: JSON).
func WithCodec(codec Codec) Option { return func(c *config) { c.codec = codec } }

// WithReadConns sets the size of SQLite's read-only connection pool
// (default 4; below 1, Open of a SQLite store fails with
// ErrInvalidArgument). Writes always go through one writer connection.
// PostgreSQL ignores it.
func WithReadConns(n int) Option { return func(c *config) { c.readConns = n } }

// WithMaxConns sets the size of the Postgres pool Open creates (default:
// pgxpool's, or the DSN's pool_max_conns; below 1, Open fails with
// ErrInvalidArgument). OpenPool leaves the caller's pool as it is, and
// SQLite ignores it.
func WithMaxConns(n int) Option {
	return func(c *config) { c.maxConns, c.maxConnsSet = n, true }
}

// WithClock sets the clock queue deadlines and run times are computed from
// (default, or nil: time.Now). Tests use it to move time without sleeping.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// MaxPayloadSize is the largest payload, in bytes, of a job, an event or an
// outbox message, on both engines (notifications have NOTIFY's smaller
// limit, see Store.Notify). A larger one fails with ErrPayloadTooLarge
// before any I/O. It is what SQLite's driver handles with room to spare:
// each SQLite connection has a fixed memory budget (256 MiB in
// ncruces/go-sqlite3), and a row of a few tens of MiB already exhausts it
// once statements copy it, so a claim of such jobs failed and every later
// one with it. Larger data belongs elsewhere (a file or object store), with
// its reference in the payload.
const MaxPayloadSize = 4 << 20

// WithMaxPayloadSize lowers the payload limit to n bytes (1 to
// MaxPayloadSize; other values make Open fail with ErrInvalidArgument).
func WithMaxPayloadSize(n int) Option { return func(c *config) { c.maxPayload = n } }

func newConfig(opts []Option) (config, error) {
	c := config{migrate: true, log: slog.Default(), codec: JSONCodec{}, readConns: 4, clock: time.Now,
		maxPayload: MaxPayloadSize, stallWarning: DefaultHorizonStallWarning}
	for _, o := range opts {
		o(&c)
	}
	// A nil clock, codec or logger is the default, as if the option were
	// not given (they panicked at first use).
	if c.clock == nil {
		c.clock = time.Now
	}
	if c.codec == nil {
		c.codec = JSONCodec{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	// The pool sizes are checked by the Open that uses them (checkPoolSize):
	// each engine ignores the other's, as README's Engine differences says.
	if c.maxPayload < 1 || c.maxPayload > MaxPayloadSize {
		return c, opErr("open", "", fmt.Errorf("%w: payload limit %d outside 1..%d", ErrInvalidArgument, c.maxPayload, MaxPayloadSize))
	}
	return c, checkInsertMiddleware(c.insert)
}

// checkPoolSize refuses the pool size of the pool this Open makes (SQLite's
// readers, or a Postgres pool Open creates), rather than clamp it silently
// to the default (README, Names and arguments). The other engine's option,
// and WithMaxConns on OpenPool (the caller's pool), are ignored: a
// configuration shared by deployments on both engines opens on either.
func (c config) checkPoolSize(sqlite bool) error {
	if sqlite && c.readConns < 1 {
		return opErr("open", "", fmt.Errorf("%w: WithReadConns(%d): at least 1", ErrInvalidArgument, c.readConns))
	}
	if !sqlite && c.maxConnsSet && c.maxConns < 1 {
		return opErr("open", "", fmt.Errorf("%w: WithMaxConns(%d): at least 1", ErrInvalidArgument, c.maxConns))
	}
	return nil
}

// checkPayload enforces the payload limit; what names the payload in the
// error ("payload", "job 3", ...).
func (s *Store) checkPayload(what string, payload []byte) error {
	if len(payload) > s.maxPayload {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrPayloadTooLarge, what, len(payload), s.maxPayload)
	}
	return nil
}

// checkPayloadAt is checkPayload for the payload of a batch's element i
// ("job 3's payload"), naming it only when it is refused: formatting the
// name of every element cost a batch about 1,000 instructions a job
// (callgrind, a 1,000-job SQLite EnqueueMany: the formatting and its garbage).
func (s *Store) checkPayloadAt(kind string, i int, payload []byte) error {
	if len(payload) <= s.maxPayload {
		return nil
	}
	return s.checkPayload(fmt.Sprintf("%s %d's payload", kind, i), payload)
}

// MaxBatchSize is the largest batch, in bytes, one PublishMany or
// EnqueueMany takes (every batch form: keyed, unique, typed, outbox, Tx),
// on both engines: its payloads, keys and headers (as stored: a JSON
// object) together, plus BatchElementOverhead bytes an element. A larger
// batch fails with ErrPayloadTooLarge before any I/O. On PostgreSQL a batch
// is one statement, sent in one protocol message, and pgx refuses a message
// over 1 GiB (pgproto3's maxMessageBodyLen, 0x3fffffff-2 bytes: the
// server's PG_LARGE_MESSAGE_LIMIT), after building it: a batch of 260
// payloads of 4 MiB failed after two minutes with 3.7 GB of memory and an
// error no sentinel matched, while SQLite stored it. The bound is under a
// quarter of that limit, because how many bytes a payload takes in the
// message depends on the pool's query exec mode: as many as it has under
// the extended protocol's binary format (pgx's default), twice as many
// under QueryExecModeExec (text: bytea as hex), four times as many under
// the simple protocol (PgBouncer's usual settings: hex in an escaped
// literal; review55b measured 1.000, 2.000 and 4.000 bytes sent a payload
// byte). The rest leaves room for what the bound does not count exactly
// (the statement's other parameters, each array's header). Split larger
// batches: a batch of full MaxPayloadSize payloads holds at most 59.
const MaxBatchSize = 240 << 20

// BatchElementOverhead is what each element of a batch counts toward
// MaxBatchSize beside its payload, key and headers: more than PostgreSQL's
// encoding of the element's other columns takes (a job's priority, max
// attempts, run and expiry times and their array slots: 54 bytes; an
// event's key flag and slots: 17), so a batch of many small elements is
// bounded too.
const BatchElementOverhead = 64

// batchSize adds one element of a batch to a batch's running size.
func batchSize(size int64, payload, key, headers int) int64 {
	return size + int64(payload) + int64(key) + int64(headers) + BatchElementOverhead
}

// checkBatchSize refuses a batch whose size (batchSize) exceeds
// MaxBatchSize; kind names its elements ("jobs", "messages").
func checkBatchSize(kind string, n int, size int64) error {
	if size <= MaxBatchSize {
		return nil
	}
	return fmt.Errorf("%w: the batch of %d %s is %d bytes (payloads, keys and headers, and %d bytes an element), the limit is %d (MaxBatchSize): split it",
		ErrPayloadTooLarge, n, kind, size, BatchElementOverhead, int64(MaxBatchSize))
}

// Open opens the store behind dsn: "postgres://..." or "postgresql://..." or
// pgx's key=value form ("host=/tmp port=5432 dbname=app user=app") for
// PostgreSQL; a file path, "sqlite:path" or a "file:" URI for SQLite (an
// in-memory or temporary SQLite database, ":memory:", "file::memory:",
// "mode=memory", is refused with ErrInvalidArgument: the store's
// connections could not share it). With auto-migration on (the default) it brings the schema up to date. A current
// schema is only read, so a role with just the privileges of the library's
// statements can open it (README.md, "Schema and migrations"); migrating
// needs the schema owner's.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	kind, target := dsnform.Classify(dsn)
	if kind == dsnform.PostgresURL || kind == dsnform.PostgresKeyValue || kind == dsnform.SQLite {
		if err := c.checkPoolSize(kind == dsnform.SQLite); err != nil {
			return nil, err
		}
	}
	if kind == dsnform.PostgresURL || kind == dsnform.PostgresKeyValue || kind == dsnform.SQLite {
		// A PostgreSQL DSN mistyped into a file name too: SQLite's errors
		// quote the name, so what would be its password is scrubbed.
		c.secrets = dsnform.Secrets(dsn)
		c.log = dsnform.Logger(c.log, c.secrets)
	}
	switch kind {
	case dsnform.PostgresURL:
		s, err := openPostgres(ctx, dsn, c)
		return s, redact(err, c.secrets)
	case dsnform.SQLite:
		s, err := openSQLite(ctx, target, c)
		return s, redact(err, c.secrets)
	case dsnform.Empty:
		return nil, opErr("open", "", fmt.Errorf("%w: empty DSN", ErrInvalidArgument))
	case dsnform.PostgresKeyValue:
		if _, err := pgxpool.ParseConfig(dsn); err != nil {
			// pgx's message quotes the DSN, its password masked only where
			// pgx recognizes it; this one names no part of the DSN.
			return nil, opErr("open", "", redact(keyValueParseError(err), c.secrets))
		}
		s, err := openPostgres(ctx, dsn, c)
		return s, redact(err, c.secrets)
	default: // dsnform.Unsupported: target is the scheme, or "" when it may hold a password
		return nil, opErr("open", "", fmt.Errorf("%w: unsupported DSN scheme %q (use postgres://, postgresql://, key=value, sqlite:, file: or a file path)", ErrInvalidArgument, target))
	}
}

// OpenPool opens a store on an application's own pool, so alkstore and the
// application share connections. Close leaves the pool open.
func OpenPool(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, opErr("open", "", fmt.Errorf("%w: nil pool", ErrInvalidArgument))
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	// The pool's DSN, when it was parsed from one, and its password.
	c.secrets = dsnform.Secrets(pool.Config().ConnString()).With(pool.Config().ConnConfig.Password)
	c.log = dsnform.Logger(c.log, c.secrets)
	s, err := newPostgres(ctx, pool, false, c)
	return s, redact(err, c.secrets)
}

// newStore makes the store; password is the one its connections use,
// scrubbed from its errors with the DSN's secrets.
func newStore(eng engine, c config, password string) *Store {
	secrets := c.secrets.With(password)
	return &Store{eng: eng, log: dsnform.Logger(c.log, secrets), codec: c.codec, secrets: secrets, clock: c.clock,
		maxPayload: c.maxPayload, insert: c.insert, hub: &wake.Hub{}, life: newLifecycle(eng.kind() == "pg")}
}

// logger is l (a GroupOpts' or SubscribeOpts' own), else the store's, with
// the DSN's secrets scrubbed from its lines as from the store's.
func (s *Store) logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return s.log
	}
	return dsnform.Logger(l, s.secrets)
}

// Engine reports "pg" or "lite".
func (s *Store) Engine() string { return s.eng.kind() }

// singleWriter reports whether one transaction holds the database's only
// writer for its whole life (SQLite's writer slot).
func (s *Store) singleWriter() bool {
	_, lite := s.eng.(*liteEngine)
	return lite
}

// check refuses new operations once the store is shutting down and its
// loops have returned (see Shutdown).
func (s *Store) check() error {
	if s == nil {
		return errNoStore
	}
	if s.life.at() >= phaseDraining {
		return ErrClosed
	}
	return nil
}

// driverErr normalizes an error from the database driver: a finished
// transaction is ErrTxDone, no rows is ErrNotFound, a closed store is
// ErrClosed, and the DSN's password never shows.
func (s *Store) driverErr(err error) error {
	// An operation's own context ending is its own error, not the store's
	// closing (a hard stop cancels statements on the server instead). A
	// lock wait a hard stop ended (endLockWaits) may fail before the
	// shutdown drains: it is the store's closing too.
	phase := s.life.at()
	closing := (phase >= phaseDraining || phase >= phaseClosing && errors.Is(err, litedriver.ErrInterrupted)) &&
		!errors.Is(err, ErrClosed) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrTxDone): // marked already (Tx.failed)
	case errors.Is(err, pgx.ErrTxClosed), errors.Is(err, sql.ErrTxDone), errors.Is(err, litedriver.ErrRolledBack):
		err = fmt.Errorf("%w: %w", ErrTxDone, err)
	case closing:
		err = fmt.Errorf("%w: %w", ErrClosed, err)
		closing = false
	default:
		err = jobRuleErr(noRows(err))
	}
	if closing && errors.Is(err, ErrTxDone) {
		// A hard Shutdown rolls open transactions back under their users:
		// their next operation says ErrClosed, as Shutdown promises.
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return redact(err, s.secrets)
}

// keyValueParseError is a key=value DSN's parse error without the DSN pgx
// quotes: what failed, and the cause pgx wraps (which quotes no DSN).
func keyValueParseError(err error) error {
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		if cause := errors.Unwrap(pce); cause != nil {
			return fmt.Errorf("%w: the key=value DSN does not parse: %v", ErrInvalidArgument, cause)
		}
	}
	return fmt.Errorf("%w: the key=value DSN does not parse (see pgx's keyword/value connection string syntax)", ErrInvalidArgument)
}
