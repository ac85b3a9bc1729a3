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

func TestBatchSavepoint(t *testing.T) {
	for got, want := range map[string]string{
		SavepointBatch:   "SAVEPOINT alkstore_batch;",
		ReleaseBatch:     "RELEASE SAVEPOINT alkstore_batch;",
		RollbackToBatch:  "ROLLBACK TO SAVEPOINT alkstore_batch;",
		ProbeTransaction: "BEGIN;",
		EndProbe:         "ROLLBACK;",
	} {
		if got != want {
			t.Errorf("statement = %q, want lite/queues.sql's %q", got, want)
		}
	}
}
