package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
)

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

// redactedError hides a secret (a DSN password) from an error's text while
// keeping the original reachable for errors.Is and errors.As.
type redactedError struct {
	err    error
	secret string
}

func (e *redactedError) Error() string {
	return strings.ReplaceAll(e.err.Error(), e.secret, "xxxxx")
}

func (e *redactedError) Unwrap() error { return e.err }

func redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redactedError{err: err, secret: secret}
}

// redactAll is redact for several candidate secrets, longest first (so a
// secret containing another is hidden whole).
func redactAll(err error, secrets []string) error {
	secrets = slices.Clone(secrets)
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		err = redact(err, s)
	}
	return err
}
