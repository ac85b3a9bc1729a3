package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExample runs the example on SQLite: the request's trace holds the
// enqueue and the publish, the worker's handling under the enqueue and the
// consumer's under the publish; the scrape shows alkstore's metrics.
func TestExample(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), filepath.Join(t.TempDir(), "app.db"), &out))
	got := out.String()
	tree := got[strings.Index(got, "one trace:"):strings.Index(got, "\nhttp://")]
	assert.Equal(t, 1, strings.Count(tree, "POST /orders"), "one root")
	for _, want := range []string{
		"\n  enqueue emails [producer]",
		"\n    process emails [consumer]",
		"\n      smtp send [internal]",
		"\n  publish orders [producer]",
		"\n    process orders [consumer]",
	} {
		assert.Contains(t, tree, want)
	}
	lines := strings.Split(strings.TrimSpace(tree), "\n")[1:]
	trace := lines[0][strings.LastIndex(lines[0], " ")+1:]
	for _, l := range lines {
		assert.True(t, strings.HasSuffix(l, trace), "every span of one trace: %s", l)
	}
	for _, want := range []string{"messaging_client_sent_messages", "messaging_process_duration_seconds_count", "alkstore_job_start_delay_seconds_count", "alkstore_horizon_lag"} {
		assert.Contains(t, got, want)
	}
}
