package pgtest

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// EnginesEnv names the engines the behaviour tests run on: "lite", "pg" or
// "lite,pg" (any order). Unset or empty means both.
const EnginesEnv = "ALK_ENGINES"

// allEngines is every engine, in the order tests run them.
var allEngines = []string{"pg", "lite"}

// Engines returns the engines ALK_ENGINES selects, in the order tests run
// them (pg first). An unknown or empty name is an error, so a typo fails the
// run instead of quietly testing nothing.
func Engines() ([]string, error) {
	v := strings.TrimSpace(os.Getenv(EnginesEnv))
	if v == "" {
		return allEngines, nil
	}
	want := map[string]bool{}
	for name := range strings.SplitSeq(v, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(allEngines, name) {
			return nil, fmt.Errorf("pgtest: %s=%q: unknown engine %q; use lite, pg or lite,pg", EnginesEnv, v, name)
		}
		want[name] = true
	}
	var out []string
	for _, name := range allEngines {
		if want[name] {
			out = append(out, name)
		}
	}
	return out, nil
}
