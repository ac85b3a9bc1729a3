package pgtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEngines(t *testing.T) {
	for v, want := range map[string][]string{
		"":          {"pg", "lite"},
		"lite":      {"lite"},
		"pg":        {"pg"},
		"lite,pg":   {"pg", "lite"},
		" pg, lite": {"pg", "lite"},
	} {
		t.Setenv(EnginesEnv, v)
		got, err := Engines()
		require.NoError(t, err, "%q", v)
		assert.Equal(t, want, got, "%q", v)
	}
	for _, v := range []string{"sqlite", "lite,", "postgres", "lite;pg"} {
		t.Setenv(EnginesEnv, v)
		_, err := Engines()
		assert.ErrorContains(t, err, "unknown engine", "%q", v)
	}
}
