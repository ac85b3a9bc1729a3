# Every target pins the Go toolchain: machines default to their own Go and
# ignore go.mod's toolchain line.
export GOTOOLCHAIN := go1.27.3
export GOFLAGS := -buildvcs=false

# The CLIs that make and the tests shell out to, built from tools/go.mod into
# the git-ignored bin/ before anything uses them: a cold build cache compiles
# them here, never inside a test's deadline. goose gets only the Postgres and
# SQLite drivers (tests/tools_test.go builds it with the same tags).
GOOSE_TAGS := no_clickhouse,no_libsql,no_mssql,no_mysql,no_vertica,no_ydb
SQLC := bin/sqlc

# Extra go test flags, e.g. GOTESTFLAGS=-v or GOTESTFLAGS='-run TestX'.
GOTESTFLAGS ?=

.PHONY: help check tools demo test test-citus bench bench-otel bench-compare bench-median bench-scale vet generate sqlc-diff tidy-diff fmt-diff screenshots

## help: list the targets
help:
	@sed -n 's/^## \([a-z-]*\): /\1\t/p' $(MAKEFILE_LIST) | \
		awk -F'\t' '{ printf "  %-12s %s\n", ($$1 == prev ? "" : $$1), $$2; prev = $$1 }'

## check: exactly what CI runs (.ci/run installs what is missing, then runs this):
## check: tidy-diff, fmt-diff, tools, sqlc-diff, vet, make test, then make test-citus
## check: (which skips, saying so, without ../shared/citus)
check: tidy-diff fmt-diff tools sqlc-diff vet test test-citus

## tools: build sqlc and the goose CLI (Postgres and SQLite drivers only) into bin/
tools:
	go build -modfile=tools/go.mod -o bin/sqlc github.com/sqlc-dev/sqlc/cmd/sqlc
	go build -modfile=tools/go.mod -tags=$(GOOSE_TAGS) -o bin/goose github.com/pressly/goose/v3/cmd/goose

## demo: publish and read back on embedded SQLite (no setup)
demo:
	go run ./examples/demo

# The race detector instruments every package but SQLite's engine: that is C
# translated to Go (github.com/ncruces/go-sqlite3-wasm), where instrumenting
# each memory access made SQLite about 90 times slower (loading 50,000 rows:
# 27 s against 0.3 s) and the SQLite halves the slowest tests of the suite.
# Everything around it (alkstore, the driver's Go side, database/sql, pgx) is
# still instrumented, as it would be beside a cgo SQLite, whose C code -race
# never sees either.
RACE := -race -gcflags=github.com/ncruces/go-sqlite3-wasm/v6=-race=false

# -p 4: go test runs at most -p test binaries at once (GOMAXPROCS, 2, by
# default), and starts them in the order of its package list. ./tests, the
# longest by minutes, is named first: as the last of ./... it started only
# once every other package had (63 s into a 385 s run), and its first,
# serial, minute then ran with the two cores mostly idle. Now that minute
# runs beside the CLI's, the console's and alktest's tests (subprocesses
# and browsers), and ./tests prints first.
# otel/alkotel is a module of its own (OpenTelemetry stays out of the core's
# dependencies): its tests run beside the core's and print after them.
TESTP := 4

# -vet=off: go test runs a subset of go vet's analyzers (atomic, bool,
# buildtags, directive, errorsas, ifaceassert, nilfunc, printf,
# stringintconv, tests) on every package it tests, again whenever a package
# changed; make vet runs all of them on every package of both modules, and
# make check (CI) runs vet before test. After a change to store, building
# every package's tests with and without it (no test selected, load 14-18):
# 55.1 and 51.2 CPU-seconds. GOTESTFLAGS=-vet=on (or -vet=<list>) brings it back.
TESTVET := -vet=off

## test: the whole suite, both engines (starts a throwaway PostgreSQL unless
## test: ALK_PG_DSN is set); ALK_ENGINES=lite (or pg) runs one engine's half
test:
	@otel=$$(mktemp); \
	echo "cd otel/alkotel && go test $(RACE) $(TESTVET) -timeout 10m $(GOTESTFLAGS) ./... (beside, printed after)"; \
	(cd otel/alkotel && go test $(RACE) $(TESTVET) -timeout 10m $(GOTESTFLAGS) ./...) > $$otel 2>&1 & \
	echo "go test $(RACE) $(TESTVET) -p $(TESTP) -timeout 25m $(GOTESTFLAGS) ./tests ./..."; \
	go test $(RACE) $(TESTVET) -p $(TESTP) -timeout 25m $(GOTESTFLAGS) ./tests ./...; core=$$?; \
	wait $$!; alkotel=$$?; cat $$otel; rm -f $$otel; \
	[ $$core = 0 ] && [ $$alkotel = 0 ]

## test-citus: the contract tests that apply to Citus (CITUS_TESTS) against a real cluster, a
## test-citus: coordinator and two workers (../shared/citus builds it; skipped when absent); 3.5 to
## test-citus: 5 minutes here; latency-bound tests (TestCrossProcessWake) are left out
CITUS_TESTS ?= ^(TestReaderNeverSkipsOutOfOrderCommits|TestOpenTransactionHoldsTheHorizon|TestNewerTransactionWithOlderOffsetHoldsTheHorizon|TestClaimFencing|TestTxSettleIsFencedByTheClaim|TestTxCommitsOrDiscardsEverythingTogether|TestAdoptedTransactions|TestSubscribeReplaysThenFollows|TestSecondStoreReceiverWakes|TestWorkWakesOnEnqueue|TestConcurrentIncrementsAreExact|TestFirstUpdatesOfANewKeyCompose|TestSchedulerHandover|TestOneBoundaryOneFire|TestUniqueJobConcurrentEnqueuers|TestUniqueJobRacingTransactionsPostgres|TestUniqueJobInTransactions|TestJanitorCreatesPartitionsAhead|TestRetentionDropsWholePartitions|TestCitus.*)$$
test-citus:
	CITUS_TESTS='$(CITUS_TESTS)' RACE='$(RACE)' .ci/test-citus

## bench: throughput figures beside their raw-SQL ceilings, both engines; then alkotel's cost
## bench: on a burn-down (plain, headers, telemetry off, SDK with a no-op exporter: jobs/s, CPU/job, ratios)
bench:
	go run ./bench
	$(MAKE) bench-otel

## bench-otel: what alkotel costs a burn-down, in one run (OTELBENCH_FLAGS, e.g. -engines lite -rounds 5)
OTELBENCH_FLAGS ?=
bench-otel:
	cd otel/alkotel && go run ./internal/otelbench $(OTELBENCH_FLAGS)

## bench-compare: the bench of the working tree beside BASE's, figure by figure, builds alternating;
## bench-compare: BASE defaults to the merge-base with main (HEAD~1 on main); ONLY=queues,streams
## bench-compare: picks sections; ROUNDS runs a side; FIGURES=<regexp> picks figures; BENCH_FLAGS go to
## bench-compare: every bench run (README, Performance)
BASE ?=
ONLY ?= streams,queues,receivers,compaction,scheduling
ROUNDS ?= 4
FIGURES ?=
BENCH_FLAGS ?= -d 1s
bench-compare:
	go run ./bench/compare -base "$(BASE)" -only "$(ONLY)" -rounds $(ROUNDS) -figures '$(FIGURES)' -- $(BENCH_FLAGS)

## bench-median: the working tree's bench alone, RUNS runs a figure (default 3): each figure's median
## bench-median: and range, its ratio's median and range, and with queues River and goqite (README, Performance)
RUNS ?= 3
bench-median:
	go run ./bench/compare -median -only "$(ONLY)" -rounds $(RUNS) -figures '$(FIGURES)' -- $(BENCH_FLAGS)

## bench-scale: costs beside 1e5, 1e6 and 1e7 unrelated rows, both engines (about a quarter of an hour; not in bench)
bench-scale:
	go run ./bench -only scale

## vet: go vet every package
vet:
	go vet ./...
	cd otel/alkotel && go vet ./...

# The sqlc-shared-tx example's application has its own sqlc config.
SQLC_EXAMPLE := examples/sqlc-shared-tx/sqlc.yaml

## generate: regenerate db/ from queries/ and schema/ (and the sqlc example's code)
generate: tools
	$(SQLC) generate
	$(SQLC) generate -f $(SQLC_EXAMPLE)

## sqlc-diff: fail when db/ (or the sqlc example's code) is not what sqlc would generate
sqlc-diff: tools
	$(SQLC) diff
	$(SQLC) diff -f $(SQLC_EXAMPLE)

## tidy-diff: fail when go.mod/go.sum are not what `go mod tidy` would write
tidy-diff:
	go mod tidy -diff
	cd otel/alkotel && go mod tidy -diff

## fmt-diff: fail when any Go file (db/ included) is not gofmt-clean
# Uses the pinned toolchain's gofmt, since an older one rejects newer syntax.
fmt-diff:
	@out=$$("$$(go env GOROOT)/bin/gofmt" -l .); \
	if [ -n "$$out" ]; then echo "not gofmt-clean:"; echo "$$out"; exit 1; fi

## screenshots: render the web console's main pages on a demo data set to docs/screenshots/*.png (needs chromium; not part of test)
screenshots:
	go run ./internal/consoledemo -out docs/screenshots
