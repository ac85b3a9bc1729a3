package queries

import "testing"

func TestDataVersion(t *testing.T) {
	if DataVersion != "PRAGMA data_version;" {
		t.Fatalf("DataVersion = %q, want lite/notify.sql's PRAGMA", DataVersion)
	}
}

func TestSchemaObjects(t *testing.T) {
	if SchemaObjects != "PRAGMA main.table_list;" {
		t.Fatalf("SchemaObjects = %q, want lite/schema.sql's PRAGMA", SchemaObjects)
	}
}
