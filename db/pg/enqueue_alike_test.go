package pgdb

import (
	"math"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestEnqueueJobsAlikeFromIsEnqueueJobsAlike: the hand-written
// EnqueueJobsAlikeFrom sends EnqueueJobsAlike's arguments in its order
// (its payloads in place of arg.Payloads), so a change of the query
// (regenerated) that this file does not follow fails here rather than
// binding the wrong parameter.
func TestEnqueueJobsAlikeFromIsEnqueueJobsAlike(t *testing.T) {
	generated, err := os.ReadFile("queues.sql.go")
	if err != nil {
		t.Fatal(err)
	}
	handWritten, err := os.ReadFile("enqueue_alike.go")
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)func \(q \*Queries\) EnqueueJobsAlike\(.*?\n}\n`).Find(generated)
	if fn == nil {
		t.Fatal("no EnqueueJobsAlike in queues.sql.go")
	}
	field := regexp.MustCompile(`[&.\w]+`)
	list := func(re string, src []byte) []string {
		m := regexp.MustCompile(re).FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s: not found", re)
		}
		var out []string
		for _, f := range field.FindAll(m[1], -1) {
			out = append(out, string(f))
		}
		return out
	}
	want := list(`(?s)q\.db\.QueryRow\(ctx, enqueueJobsAlike,(.*?)\)\n`, fn)
	got := list(`(?s)q\.db\.Query\(ctx, enqueueJobsAlike,(.*?)\)\n`, handWritten)
	if len(want) == 0 || want[0] != "arg.Payloads" {
		t.Fatalf("EnqueueJobsAlike's first argument is not arg.Payloads: %q", want)
	}
	want[0] = "payloads"
	if !slices.Equal(want, got) {
		t.Fatalf("EnqueueJobsAlike sends %q, EnqueueJobsAlikeFrom %q", want, got)
	}
}

// TestAppendInt8Array reads what pgx writes for a bigint[] in binary, and
// refuses (leaving ids as they were) every other form.
func TestAppendInt8Array(t *testing.T) {
	m := pgtype.NewMap()
	enc := func(v any) []byte {
		b, err := m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	prefix := []int64{7, 8}
	for _, ids := range [][]int64{{}, {1}, {1, 2, 3}, {math.MinInt64, -1, 0, math.MaxInt64}, make([]int64, 1000)} {
		got, ok := AppendInt8Array(slices.Clone(prefix), enc(ids))
		if want := append(slices.Clone(prefix), ids...); !ok || !slices.Equal(got, want) {
			t.Errorf("%v: got %v, %v; want %v", ids, got, ok, want)
		}
	}
	one := enc([]int64{42})
	bad := map[string][]byte{
		"NULL":           nil,
		"short":          one[:11],
		"a NULL element": enc([]*int64{nil, new(int64)}),
		"int4[]":         must(m.Encode(pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, []int32{1, 2}, nil)),
		"two dimensions": enc(pgtype.Array[int64]{Elements: []int64{1, 2, 3, 4}, Valid: true,
			Dims: []pgtype.ArrayDimension{{Length: 2, LowerBound: 1}, {Length: 2, LowerBound: 1}}}),
		"truncated":        one[:len(one)-1],
		"trailing bytes":   append(slices.Clone(one), 0),
		"element length 4": func() []byte { b := slices.Clone(one); b[23] = 4; return b }(),
		"negative count":   func() []byte { b := slices.Clone(one); b[12] = 0xff; return b }(),
	}
	for name, b := range bad {
		got, ok := AppendInt8Array(slices.Clone(prefix), b)
		if ok || !slices.Equal(got, prefix) {
			t.Errorf("%s: got %v, %v; want %v, false", name, got, ok, prefix)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
