package store

import (
	"errors"
	"fmt"

	dsnform "github.com/alkstore/alkstore/internal/dsn"
)

// Sentinel errors. Every error the library returns wraps one of these or a
// driver error; match them with errors.Is.
var (
	ErrInvalidName     = errors.New("invalid name")
	ErrReservedName    = errors.New("reserved name")
	ErrClosed          = errors.New("store closed") // also what closed receivers and listeners return
	ErrPayloadTooLarge = errors.New("payload too large")
	ErrCodec           = errors.New("codec error")
	ErrNotFound        = errors.New("not found")
	ErrClaimLost       = errors.New("claim lost")
	ErrSchemaVersion   = errors.New("schema version mismatch")
	ErrTxDone          = errors.New("transaction already finished")
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrNotStored is a write that the database carried out without an
	// error of its own but that stored none of the call's rows: an
	// application's trigger skipped a row (a PostgreSQL BEFORE INSERT
	// trigger returning NULL, SQLite's RAISE(IGNORE)), which refuses a
	// batch whole (all or none) and a schedule's fire (the schedule stays
	// at its boundary), or a unique job was not placed after 8 tries (its
	// insert found the key held each time and the holder was gone before
	// its id could be read: the keys kept changing hands, or a trigger
	// skips the job), or a schedule's Resume lost its 5 races with Sets
	// that replaced the schedule's spec (it stays paused). Nothing of the
	// call was stored. The error's text
	// says which; it reads as before (no "not stored" in it), and on
	// PostgreSQL a batch's refusal keeps the driver's *pgconn.PgError
	// (SQLSTATE AKSKP) reachable with errors.As.
	ErrNotStored = errors.New("not stored")
)

// notStoredError matches ErrNotStored and reads as its text alone; its
// cause, when it has one (PostgreSQL's AKSKP error), stays reachable.
type notStoredError struct {
	text  string
	cause error
}

func (e *notStoredError) Error() string        { return e.text }
func (e *notStoredError) Is(target error) bool { return target == ErrNotStored }
func (e *notStoredError) Unwrap() error        { return e.cause }

// notStored is an ErrNotStored error with the text fmt.Sprintf(format,
// args...) and no cause.
func notStored(format string, args ...any) error {
	return &notStoredError{text: fmt.Sprintf(format, args...)}
}

// closedBy is what a receiver or listener reports once its wake feed ended:
// ErrClosed, joined with the failure that ended the feed, if one did.
func closedBy(cause error) error {
	if cause == nil {
		return ErrClosed
	}
	return errors.Join(ErrClosed, cause)
}

// OpError is the error every operation returns: the operation, the name of
// the queue, stream or channel it acted on, and the cause. The cause stays
// reachable with errors.Is and errors.As.
type OpError struct {
	Op   string // "publish", "read since", "open", ...
	Name string // the mechanism name, empty when the operation has none
	Err  error
}

func (e *OpError) Error() string {
	if e.Name == "" {
		return "alkstore: " + e.Op + ": " + e.Err.Error()
	}
	return fmt.Sprintf("alkstore: %s %q: %v", e.Op, e.Name, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

func opErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Name: name, Err: err}
}

// redact hides secrets (a DSN's password and its pieces, dsnform.Secrets,
// longest first) from err's text while keeping the original reachable for
// errors.Is and errors.As.
func redact(err error, secrets dsnform.Set) error { return dsnform.Redact(err, secrets) }
