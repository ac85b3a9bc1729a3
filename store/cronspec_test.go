package store

import (
	"errors"
	"testing"
	"time"
)

// The fire path's cache gives what parsing gives, and never keeps a
// failure.
func TestParseSpecCachedMatchesParseSpec(t *testing.T) {
	at := time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC) // a DST change in Europe/Paris
	for _, c := range []struct{ spec, tz string }{
		{"@hourly", ""}, {"@every 90s", "UTC"}, {"*/5 9-17 * * 1-5", "Europe/Paris"}, {"0 2 * * *", "America/New_York"},
	} {
		for range 2 { // the second from the cache
			want, err := parseSpec(c.spec, c.tz)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseSpecCached(c.spec, c.tz)
			if err != nil {
				t.Fatal(err)
			}
			for _, now := range []time.Time{at, at.Add(37 * time.Minute), at.Add(26 * time.Hour)} {
				if g, w := got.after(now, now), want.after(now, now); !g.Equal(w) {
					t.Errorf("%q in %q after %v: cached %v, parsed %v", c.spec, c.tz, now, g, w)
				}
			}
		}
	}
	for range 2 {
		if _, err := parseSpecCached("61 * * * *", "UTC"); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("bad spec: %v, want ErrInvalidArgument", err)
		}
	}
	if _, ok := specCache.Load(specKey{"61 * * * *", "UTC"}); ok {
		t.Fatal("a spec that failed to parse was cached")
	}
}
