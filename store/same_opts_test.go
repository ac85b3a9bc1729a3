package store

import (
	"reflect"
	"testing"
	"time"
)

// TestSameOptsComparesEveryOption: sameOpts decides that a batch's jobs
// share their options by comparing each field of EnqueueOpts by name. A
// field added to EnqueueOpts (or UniqueOpts) that sameOpts does not compare
// would let a batch whose jobs differ in it take job 0's value for every
// job; this fails until sameOpts and this list learn the new field.
func TestSameOptsComparesEveryOption(t *testing.T) {
	compared := map[string]bool{"Priority": true, "RunAt": true, "Delay": true, "MaxAttempts": true,
		"ExpiresAt": true, "Unique": true, "Headers": true}
	for f := range reflect.TypeFor[EnqueueOpts]().Fields() {
		if !compared[f.Name] {
			t.Errorf("EnqueueOpts.%s: sameOpts does not compare it", f.Name)
		}
	}
	if n := reflect.TypeFor[UniqueOpts]().NumField(); n != 3 {
		t.Errorf("UniqueOpts has %d fields; sameOpts sends a batch with any of Key, ByPeriod, ByState set down the general path, and must learn the new one", n)
	}

	// Each option set on job 1 only makes the batch not alike.
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, o := range map[string]EnqueueOpts{
		"Priority": {Priority: 1}, "RunAt": {RunAt: at}, "Delay": {Delay: time.Second}, "MaxAttempts": {MaxAttempts: 3},
		"ExpiresAt": {ExpiresAt: at}, "Unique.Key": {Unique: UniqueOpts{Key: "k"}}, "Unique.ByPeriod": {Unique: UniqueOpts{ByPeriod: time.Hour}},
		"Unique.ByState": {Unique: UniqueOpts{ByState: []JobState{}}}, "Headers": {Headers: map[string]string{"h": "v"}},
	} {
		if sameOpts([]NewJob{{}, {Opts: o}}) {
			t.Errorf("%s set on job 1 only: sameOpts says alike", name)
		}
	}
	if !sameOpts([]NewJob{{Opts: EnqueueOpts{RunAt: at}}, {Opts: EnqueueOpts{RunAt: at.In(time.FixedZone("x", 3600)), Headers: map[string]string{}}}}) {
		t.Error("the same instant in another zone, and empty against nil headers: sameOpts says not alike")
	}
}
