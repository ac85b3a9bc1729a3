package dsn

import (
	"context"
	"log/slog"
	"slices"
)

// Logger is l with the secrets of s scrubbed from every line: its message
// and every attribute's text (an error attribute stays an error, redacted
// as Redact does, so a handler that unwraps it still can). l itself when s
// scrubs nothing. The library logs the driver's errors as they come (the
// listen connection's, lost and reconnecting), and a driver error may quote
// what the DSN holds.
func Logger(l *slog.Logger, s Set) *slog.Logger {
	if l == nil || s.Empty() {
		return l
	}
	if h, ok := l.Handler().(*scrubHandler); ok && sameSet(h.secrets, s) {
		return l
	}
	return slog.New(&scrubHandler{next: l.Handler(), secrets: s})
}

func sameSet(a, b Set) bool {
	return slices.Equal(a.anywhere, b.anywhere) && slices.Equal(a.short, b.short)
}

// scrubHandler scrubs each record before its next handler sees it.
type scrubHandler struct {
	next    slog.Handler
	secrets Set
}

func (h *scrubHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Scrub(r.Message, h.secrets), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *scrubHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	scrubbed := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		scrubbed[i] = h.attr(a)
	}
	return &scrubHandler{next: h.next.WithAttrs(scrubbed), secrets: h.secrets}
}

func (h *scrubHandler) WithGroup(name string) slog.Handler {
	return &scrubHandler{next: h.next.WithGroup(name), secrets: h.secrets}
}

// attr is a with its text scrubbed: strings, errors, groups' members, and
// any other value through its text when that shows a secret.
func (h *scrubHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Scrub(v.String(), h.secrets))
	case slog.KindGroup:
		members := v.Group()
		scrubbed := make([]any, len(members))
		for i, m := range members {
			scrubbed[i] = h.attr(m)
		}
		return slog.Group(a.Key, scrubbed...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.Any(a.Key, Redact(err, h.secrets))
		}
		if text := v.String(); Scrub(text, h.secrets) != text {
			return slog.String(a.Key, Scrub(text, h.secrets))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
