package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// One figure at a time, for `make bench-compare` (bench/compare): -list
// names the figures the chosen sections measure, -figure measures one of
// them alone, -json prints each figure as one JSON object (a fig) instead
// of a table row.
//
//	go run ./bench -only queues -list
//	go run ./bench -only queues -figure 'lite enqueue, 8 producer(s) (jobs/s)' -json
var (
	listFigs = flag.Bool("list", false, "print the names of the figures the chosen sections measure, one a line; measure nothing")
	figure   = flag.String("figure", "", "measure only this figure, named as -list prints it (engine, a space, the name)")
	jsonOut  = flag.Bool("json", false, "print one JSON object a line per figure instead of the table")
)

// want reports whether the figure named what runs on engine. Each section
// asks before the work a figure needs (its fills included), so -figure
// skips the rest; under -list it prints the name and says no.
func want(engine, what string) bool {
	name := engine + " " + what
	if *listFigs {
		fmt.Println(name)
		return false
	}
	return *figure == "" || *figure == name
}

// wantEngine reports whether any figure of engine may run, so a run of one
// figure does not open the other engine's databases.
func wantEngine(engine string) bool {
	return *listFigs || *figure == "" || strings.HasPrefix(*figure, engine+" ")
}

// fig is a figure as -json prints it. Value is the library's figure; Ceiling,
// when not zero, what it is measured against in the same run (raw SQL, or
// the figure named in Beside). Lower marks a cost (a latency, a CPU share):
// smaller is better.
type fig struct {
	Engine  string  `json:"engine"`
	Figure  string  `json:"figure"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Ceiling float64 `json:"ceiling,omitempty"`
	Beside  string  `json:"beside,omitempty"`
	Lower   bool    `json:"lower,omitempty"`
}

// emit prints f as JSON when -json is set and reports whether it did; the
// caller prints its table row otherwise.
func emit(f fig) bool {
	if !*jsonOut {
		return false
	}
	_ = json.NewEncoder(os.Stdout).Encode(f)
	return true
}

// unit is the unit of a rate figure, from its name's "(jobs/s)" suffix.
func unit(what string) string {
	if i := strings.LastIndex(what, "("); i >= 0 && strings.HasSuffix(what, ")") {
		return what[i+1 : len(what)-1]
	}
	return "/s"
}

// wakeRow prints a p50/p99 row.
func wakeRow(engine, what string, p50, p99 time.Duration) {
	if emit(fig{Engine: engine, Figure: what, Value: float64(p50) / 1e3, Unit: "µs p50", Ceiling: float64(p99) / 1e3,
		Beside: "p99", Lower: true}) {
		return
	}
	fmt.Printf("%-8s %-44s %14s %14s\n", engine, what, "p50 "+p50.Round(time.Microsecond).String(),
		"p99 "+p99.Round(time.Microsecond).String())
}

// plain prints a rate with nothing beside it.
func plain(engine, what string, v float64) {
	if emit(fig{Engine: engine, Figure: what, Value: v, Unit: "/s"}) {
		return
	}
	fmt.Printf("%-8s %-44s %14.0f %14s\n", engine, what, v, "")
}
