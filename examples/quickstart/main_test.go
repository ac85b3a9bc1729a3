package main

import "testing"

// TestQuickStart runs the README's quick start (this package's main, which
// README.md shows whole) in a temporary directory, twice: a second run
// places a second order and the billing consumer reads only that one.
// main exits the test binary on any error.
func TestQuickStart(t *testing.T) {
	t.Chdir(t.TempDir())
	main()
	main()
}
