# gohorovod: make demo runs a real multi-process job; make test runs every test.
# Both install what they need first (make deps).

GO      ?= go
NP      ?= 2
# Build with MPI when an MPI C compiler is present (make deps installs one).
TAGS    ?= $(shell command -v mpicc >/dev/null 2>&1 && echo mpi)
GOFLAGS_TAGS = $(if $(TAGS),-tags $(TAGS),)

.PHONY: all deps build test test-unit test-mpi bench demo vet fmt clean

all: build

deps:
	@bash scripts/deps.sh
	@$(GO) mod download

build: deps
	@mkdir -p bin
	$(GO) build $(GOFLAGS_TAGS) -o bin/ ./cmd/... ./examples/...

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags mpi ./...

test-unit:
	$(GO) test -race -count=1 ./...
	CGO_ENABLED=0 $(GO) build ./...

test-mpi: deps
	bash scripts/mpitest.sh

test: deps vet test-unit test-mpi

bench: deps build
	$(GO) test -run '^$$' -bench . -benchmem ./tensor/

demo: deps build
	bash scripts/mpirun.sh $(NP) bin/allreduce

clean:
	rm -rf bin
