package store

import (
	"encoding/json"
	"testing"
)

// The plain decoder reads what json.Unmarshal reads, or declines.
func FuzzDecodePlainHeaders(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, `{"a": "b", "c": "d"}`, `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tenant":"acme"}`,
		`{"a":"b\"c"}`, `{"a":"b",}`, `{"a":1}`, `{"a":"b"} x`, `{"a":"é:,{}"}`, ` { "a" : "b" } `, `{"a":"b","a":"c"}`, `{"a""b"}`, `{`, `"a"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, js string) {
		h, ok := decodePlainHeaders(js)
		if !ok {
			return
		}
		var want map[string]string
		if err := json.Unmarshal([]byte(js), &want); err != nil {
			t.Fatalf("%q: plain decoder accepted what json refuses (%v): %v", js, err, h)
		}
		if len(h) != len(want) {
			t.Fatalf("%q: %v, json %v", js, h, want)
		}
		for k, v := range want {
			if h[k] != v {
				t.Fatalf("%q: %v, json %v", js, h, want)
			}
		}
	})
}

// Both stored forms decode: json.Marshal's and jsonb's, escapes included.
func TestDecodeHeaders(t *testing.T) {
	for js, want := range map[string]map[string]string{
		`{"a":"b","c":"d"}`:    {"a": "b", "c": "d"},
		`{"a": "b", "c": "d"}`: {"a": "b", "c": "d"},
		`{"a":"x\u003cy\"z"}`:  {"a": "x<y\"z"},
		`{"a": "tab\there"}`:   {"a": "tab\there"},
		`{}`:                   {},
		`{"k":"é, {v}: w"}`:    {"k": "é, {v}: w"},
	} {
		got := decodeHeaders(js)
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", js, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: %v, want %v", js, got, want)
			}
		}
	}
}
