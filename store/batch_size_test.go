package store

import (
	"errors"
	"testing"
)

// TestBatchSizeBound: a batch counted at exactly MaxBatchSize passes, one
// byte more is refused; and MaxBatchSize, with the element overhead, stays
// under pgx's protocol-message limit (pgproto3's maxMessageBodyLen,
// 0x3fffffff-1) when each payload byte takes four in the message (the
// simple protocol; review55b), with room to spare.
func TestBatchSizeBound(t *testing.T) {
	const pgxMessageLimit = 0x3fffffff - 1
	const room = 32 << 20 // the statement's other parameters, arrays' headers
	if MaxBatchSize*4 > pgxMessageLimit-room {
		t.Fatalf("MaxBatchSize %d, four times over, leaves less than %d bytes of pgx's message limit %d", MaxBatchSize, room, pgxMessageLimit)
	}
	var size int64
	for range MaxBatchSize / MaxPayloadSize {
		size = batchSize(size, MaxPayloadSize-BatchElementOverhead, 0, 0)
	}
	if size != MaxBatchSize {
		t.Fatalf("size %d, want %d", size, MaxBatchSize)
	}
	if err := checkBatchSize("jobs", 128, size); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if err := checkBatchSize("jobs", 128, batchSize(size, 0, 0, 0)-BatchElementOverhead+1); !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("one byte over: %v", err)
	}
	if got := batchSize(0, 10, 3, 20); got != 10+3+20+BatchElementOverhead {
		t.Fatalf("batchSize(0, 10, 3, 20) = %d", got)
	}
}
