package queries

import "testing"

func TestDataVersion(t *testing.T) {
	if DataVersion != "PRAGMA data_version;" {
		t.Fatalf("DataVersion = %q, want lite/notify.sql's PRAGMA", DataVersion)
	}
}
