package pgdb

import (
	"math"
	"regexp"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestEnqueueJobsAlikeFromIsEnqueueJobsAlike: the hand-written
// EnqueueJobsAlikeFrom sends EnqueueJobsAlike's arguments in its order
// (its payloads in place of arg.Payloads), so a change of the query
// (regenerated) that this file does not follow fails here rather than
// binding the wrong parameter.
func TestEnqueueJobsAlikeFromIsEnqueueJobsAlike(t *testing.T) {
	gen, hand := gencheck.Func(t, "queues.sql.go", "EnqueueJobsAlike"), gencheck.Func(t, "enqueue_alike.go", "EnqueueJobsAlikeFrom")
	want := gencheck.Fields(t, regexp.MustCompile(`(?s)q\.db\.QueryRow\(ctx, enqueueJobsAlike,(.*?)\)\n`), gen)
	got := gencheck.Fields(t, regexp.MustCompile(`(?s)q\.db\.Query\(ctx, enqueueJobsAlike,(.*?)\)\n`), hand)
	if len(want) == 0 || want[0] != "arg.Payloads" {
		t.Fatalf("EnqueueJobsAlike's first argument is not arg.Payloads: %q", want)
	}
	want[0] = "payloads"
	gencheck.Same(t, "EnqueueJobsAlike's arguments", want, got)
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
