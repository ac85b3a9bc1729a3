package alkotel

import "testing"

// TestBaggageFitting: W3C baggage is cut only between members, its
// optional whitespace before a comma trimmed; nothing when no member fits.
func TestBaggageFitting(t *testing.T) {
	const v = "a=1,bb=22 , c=3"
	for _, tc := range []struct {
		room int
		want string
	}{
		{len(v), v}, {len(v) - 1, "a=1,bb=22"}, {10, "a=1,bb=22"}, {9, "a=1,bb=22"}, {8, "a=1"}, {3, "a=1"}, {2, ""}, {0, ""}, {-5, ""},
	} {
		if got := baggageFitting(v, tc.room); got != tc.want {
			t.Errorf("baggageFitting(%q, %d) = %q, want %q", v, tc.room, got, tc.want)
		}
	}
}
