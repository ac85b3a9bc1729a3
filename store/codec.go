package store

import "encoding/json"

// Codec turns typed values into payload bytes and back. Typed views (topics
// and typed jobs) use the store's codec; raw byte payloads never pass
// through it. Marshal of a non-nil value that returns a nil slice is
// stored as an empty value (Topic.Publish: only a nil message is a
// tombstone); Unmarshal then gets an empty, non-nil slice.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default codec, encoding/json.
type JSONCodec struct{}

func (JSONCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
