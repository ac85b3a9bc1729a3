package store

import "encoding/json"

// Codec turns typed values into payload bytes and back. Typed views (topics
// and typed jobs) use the store's codec; raw byte payloads never pass
// through it.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default codec, encoding/json.
type JSONCodec struct{}

func (JSONCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
