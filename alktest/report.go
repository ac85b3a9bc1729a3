package alktest

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/alkstore/alkstore/store"
)

// A failure lists up to maxListed of the queue's jobs.
const maxListed = 20

// report collects what an assertion that found no match says: the jobs it
// read and, for a Payload match, the job whose payload differs least.
type report struct {
	queue, where string
	n            int
	listed       []string
	closest      *store.Job
	diffs        []string
}

func newReport[T any](q *store.JobQueue[T], tx *store.Tx) *report {
	r := &report{queue: q.Queue().Name()}
	if tx != nil {
		r.where = " in the transaction"
	}
	return r
}

// add records job j, its decoded payload v (or why it does not decode)
// and, when a Payload match turned it down, the payload it wanted.
func (r *report) add(j *store.Job, v any, decodeErr error, want any) {
	r.n++
	if len(r.listed) < maxListed {
		r.listed = append(r.listed, describe(j, decodeErr))
	}
	if want == nil {
		return
	}
	d := diff("", reflect.ValueOf(want), reflect.ValueOf(v))
	if len(d) == 0 {
		d = []string{"unexported fields"}
	}
	if r.closest == nil || len(d) < len(r.diffs) {
		r.closest, r.diffs = j, d
	}
}

func (r *report) noMatch() string {
	var b strings.Builder
	fmt.Fprintf(&b, "alktest: no job of queue %q%s matches (%d jobs)", r.queue, r.where, r.n)
	if r.n > 0 {
		b.WriteString(":")
	}
	for _, l := range r.listed {
		b.WriteString("\n\t" + l)
	}
	if r.n > len(r.listed) {
		fmt.Fprintf(&b, "\n\t... and %d more", r.n-len(r.listed))
	}
	if r.closest != nil {
		fmt.Fprintf(&b, "\nclosest: job %d, whose payload differs from the match in:", r.closest.ID)
		for _, d := range r.diffs {
			b.WriteString("\n\t" + d)
		}
	}
	return b.String()
}

// describe is one line about a job: id, state, attempts and payload.
func describe(j *store.Job, decodeErr error) string {
	s := fmt.Sprintf("job %d %s, priority %d, attempts %d/%d: %s", j.ID, j.State, j.Priority, j.Attempts, j.MaxAttempts, shown(j.Payload))
	if decodeErr != nil {
		s += fmt.Sprintf(" (does not decode: %v)", decodeErr)
	}
	return s
}

// shown is a payload as a failure prints it: text as is, binary quoted,
// both cut to a readable length.
func shown(p []byte) string {
	if utf8.Valid(p) {
		return cut(string(p))
	}
	return cut(fmt.Sprintf("%q", p))
}

// diff lists where got differs from want, one "path: want X, got Y" line
// per differing leaf: struct fields, map keys and the elements of
// equal-length slices are compared one by one, anything else whole.
func diff(path string, want, got reflect.Value) []string {
	if !want.IsValid() || !got.IsValid() || want.Type() != got.Type() {
		if want.IsValid() && got.IsValid() && reflect.DeepEqual(want.Interface(), got.Interface()) {
			return nil
		}
		return []string{leaf(path, want, got)}
	}
	switch want.Kind() {
	case reflect.Pointer, reflect.Interface:
		if want.IsNil() || got.IsNil() {
			break
		}
		return diff(path, want.Elem(), got.Elem())
	case reflect.Struct:
		var out []string
		for i := range want.NumField() {
			if f := want.Type().Field(i); f.IsExported() {
				out = append(out, diff(path+"."+f.Name, want.Field(i), got.Field(i))...)
			}
		}
		return out
	case reflect.Map:
		if want.IsNil() != got.IsNil() {
			break
		}
		var out []string
		for _, k := range want.MapKeys() {
			out = append(out, diff(fmt.Sprintf("%s[%#v]", path, k.Interface()), want.MapIndex(k), got.MapIndex(k))...)
		}
		for _, k := range got.MapKeys() {
			if !want.MapIndex(k).IsValid() {
				out = append(out, diff(fmt.Sprintf("%s[%#v]", path, k.Interface()), reflect.Value{}, got.MapIndex(k))...)
			}
		}
		return out
	case reflect.Slice, reflect.Array:
		if want.Len() != got.Len() || (want.Kind() == reflect.Slice && want.IsNil() != got.IsNil()) {
			break
		}
		var out []string
		for i := range want.Len() {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), want.Index(i), got.Index(i))...)
		}
		return out
	}
	if reflect.DeepEqual(want.Interface(), got.Interface()) {
		return nil
	}
	return []string{leaf(path, want, got)}
}

func leaf(path string, want, got reflect.Value) string {
	if path == "" {
		path = "payload"
	}
	return fmt.Sprintf("%s: want %s, got %s", strings.TrimPrefix(path, "."), value(want), value(got))
}

func value(v reflect.Value) string {
	if !v.IsValid() {
		return "nothing"
	}
	return cut(fmt.Sprintf("%#v", v.Interface()))
}

// maxShown is how much of a payload or a value a failure prints.
const maxShown = 200

// cut shortens s to maxShown bytes, saying how long it was.
func cut(s string) string {
	if len(s) <= maxShown {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(s[:maxShown], ""), len(s))
}
