package main

import (
	"context"
	"path/filepath"
	"testing"
)

// TestMountedBehindBasicAuth runs the example's self-check: the console
// answers 401 without credentials and lists the queue with them.
func TestMountedBehindBasicAuth(t *testing.T) {
	*once, *addr = true, "127.0.0.1:0"
	if err := run(context.Background(), filepath.Join(t.TempDir(), "app.db")); err != nil {
		t.Fatal(err)
	}
}
