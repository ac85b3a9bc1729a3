package store_test

import (
	"testing"

	"github.com/alkstore/alkstore/store"
)

// TestGroupPartitionIsStable pins the partition of a few keys: a group's
// committed offsets are per partition, so a change of hash would hand a
// key's events to a partition whose offset says nothing of them (skipping
// or repeating them) across an upgrade. The values are FNV-1a (32 bits) of
// the key's bytes modulo the count; unkeyed events go by offset.
func TestGroupPartitionIsStable(t *testing.T) {
	for _, c := range []struct {
		key      string
		p16, p1k int
	}{{"a", 12, 300}, {"customer-1", 7, 535}, {"ключ", 1, 481}, {"k0", 14, 814}} {
		if got := store.KeyPartition(c.key, 16); got != c.p16 {
			t.Errorf("KeyPartition(%q, 16) = %d, want %d", c.key, got, c.p16)
		}
		if got := store.KeyPartition(c.key, 1024); got != c.p1k {
			t.Errorf("KeyPartition(%q, 1024) = %d, want %d", c.key, got, c.p1k)
		}
		key := c.key
		if got := store.GroupPartition(store.Event{Offset: 99, Key: &key}, 16); got != c.p16 {
			t.Errorf("GroupPartition of key %q = %d, want %d", c.key, got, c.p16)
		}
	}
	if got := store.GroupPartition(store.Event{Offset: 37}, 16); got != 5 {
		t.Errorf("unkeyed offset 37 of 16 partitions: %d, want 5", got)
	}
}
