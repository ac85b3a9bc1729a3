package store

import "testing"

// TestStoredHeadersSize: the size without encoding (plain keys and
// values) and with it (anything JSON escapes) are both the stored form's
// length, which MaxBatchSize counts.
func TestStoredHeadersSize(t *testing.T) {
	for _, h := range []map[string]string{
		nil, {},
		{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{"tenant": "acme", "k": "", "tracestate": "vendor=abc,other=x y~z"},
		{"a": `q"uote`}, {"a": `back\slash`}, {"a": "<html>&"}, {"a": "tab\there"}, {"a": "del\x7f"},
		{"a": "é"}, {"a": "\u2028"}, {"é": "plain"}, {"a": "plain", "b": "ünï"},
	} {
		if got, want := StoredHeadersSize(h), len(encodeHeaders(h)); got != want {
			t.Errorf("StoredHeadersSize(%q) = %d, stored %d bytes: %s", h, got, want, encodeHeaders(h))
		}
	}
}
