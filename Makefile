# Every target pins the Go toolchain: machines default to their own Go and
# ignore go.mod's toolchain line.
export GOTOOLCHAIN := go1.27.3
export GOFLAGS := -buildvcs=false

SQLC := go tool -modfile=tools/go.mod sqlc

.PHONY: demo test bench bench-compare bench-scale vet generate sqlc-diff tidy-diff fmt-diff screenshots

## demo: publish and read back on embedded SQLite (no setup)
demo:
	go run ./examples/demo

## test: the whole suite, both engines (starts a throwaway PostgreSQL unless ALK_PG_DSN is set)
test:
	go test -race -timeout 25m ./...

## bench: throughput figures beside their raw-SQL ceilings, both engines
bench:
	go run ./bench

## bench-compare: the bench of the working tree beside BASE's, figure by figure, builds alternating;
## BASE defaults to the merge-base with main (HEAD~1 on main); ONLY=queues,streams picks sections;
## ROUNDS runs a side; BENCH_FLAGS go to every bench run. See README, Performance.
BASE ?=
ONLY ?= streams,queues,receivers,compaction,scheduling
ROUNDS ?= 4
BENCH_FLAGS ?= -d 1s
bench-compare:
	go run ./bench/compare -base "$(BASE)" -only "$(ONLY)" -rounds $(ROUNDS) -- $(BENCH_FLAGS)

## bench-scale: costs beside 1e5, 1e6 and 1e7 unrelated rows, both engines (about a quarter of an hour; not in bench)
bench-scale:
	go run ./bench -only scale

vet:
	go vet ./...

# The sqlc-shared-tx example's application has its own sqlc config.
SQLC_EXAMPLE := examples/sqlc-shared-tx/sqlc.yaml

## generate: regenerate db/ from queries/ and schema/ (and the sqlc example's code)
generate:
	$(SQLC) generate
	$(SQLC) generate -f $(SQLC_EXAMPLE)

## sqlc-diff: fail when db/ (or the sqlc example's code) is not what sqlc would generate
sqlc-diff:
	$(SQLC) diff
	$(SQLC) diff -f $(SQLC_EXAMPLE)

## tidy-diff: fail when go.mod/go.sum are not what `go mod tidy` would write
tidy-diff:
	go mod tidy -diff

## fmt-diff: fail when any Go file (db/ included) is not gofmt-clean; uses the
## pinned toolchain's gofmt, since an older one rejects newer syntax
fmt-diff:
	@out=$$("$$(go env GOROOT)/bin/gofmt" -l .); \
	if [ -n "$$out" ]; then echo "not gofmt-clean:"; echo "$$out"; exit 1; fi

## screenshots: render the web console's main pages on a demo data set to docs/screenshots/*.png (needs chromium; not part of test)
screenshots:
	go run ./internal/consoledemo -out docs/screenshots
