# gohorovod: make demo runs a real multi-process job; make test runs every test;
# make test-fast is the check to run before every commit (make help lists all).
# Both install what they need first (make deps).

GO      ?= go
NP      ?= 2
# Build with MPI when an MPI C compiler is present (make deps installs one).
TAGS    ?= $(shell command -v mpicc >/dev/null 2>&1 && echo mpi)
GOFLAGS_TAGS = $(if $(TAGS),-tags $(TAGS),)

.PHONY: all help deps clusterdeps build test test-fast test-unit test-mpi test-mpich test-adapters bench demo vet fmt clean

all: build

help:
	@echo 'make build          build the commands and examples into bin/ (installs Open MPI if missing)'
	@echo 'make test-fast      before every commit: gofmt, go vet and go test -short (no end-to-end'
	@echo '                    training runs, no mpirun jobs); a few minutes at most'
	@echo 'make test           every test, as CI runs it (bash .ci/run): vet, go test -race, the'
	@echo '                    end-to-end runs, the multi-process tests under mpirun and gohorovodrun'
	@echo 'make test-mpi       only the multi-process tests (scripts/mpitest.sh; NPS, TRANSPORTS)'
	@echo 'make test-mpich     the MPI tests linked against MPICH (needs mpich installed)'
	@echo 'make bench          the tensor benchmarks, hvdbench, the synthetic benchmark and, as root,'
	@echo '                    nodebench across an emulated cluster'
	@echo 'make demo           train MNIST on NP processes through gohorovodrun (NP=2)'
	@echo 'make clean          remove bin/'

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
	CGO_ENABLED=0 $(GO) vet -tags gloo ./...

# go test ./... includes cmd/rankbench's scale smoke run (synthetic at np 32
# under gohorovodrun --gloo: at most 4*ceil(log2 np)+8 sockets a rank,
# nothing left in /dev/shm); it is skipped unless GOHOROVOD_SCALE_SMOKE=1
# until the embedded transport stops connecting every pair of ranks.
test-unit:
	$(GO) test -race -count=1 ./...
	@# MNIST's accuracy comparison of the algorithms, too slow under -race.
	$(GO) test -count=1 -run '^TestAccuracyParity$$' ./examples/mnist/
	# No C compiler, no MPI: everything builds and passes; -tags mpi without
	# cgo builds too and reports MPI as not built in.
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) build -tags mpi ./...
	CGO_ENABLED=0 $(GO) test -short -count=1 ./...
	# Without GPU support (-tags nogpu) the binaries are fully static; the
	# mock CUDA libraries' tests also run from the prebuilt copies, as on a
	# machine without a C compiler.
	CGO_ENABLED=0 $(GO) build -tags nogpu ./...
	CGO_ENABLED=0 $(GO) test -tags nogpu -count=1 ./cuda/ ./internal/cudamock/
	GOHOROVOD_CUDAMOCK=prebuilt CGO_ENABLED=0 $(GO) test -count=1 ./cuda/ ./internal/cudamock/ ./cmd/hvdgpucheck/...

# test-fast: what a developer runs before every commit. The long tests (the
# end-to-end training runs on MNIST, the launcher's and the examples' real
# multi-process jobs) skip themselves under -short; make test runs them.
# The adapters' own modules are vetted and tested too (-short).
test-fast: vet
	$(GO) test -short -count=1 ./...
	@for m in $(ADAPTERS); do echo "== $$m"; (cd $$m && $(GO) vet ./... && $(GO) test -short -count=1 ./...) || exit 1; done

test-mpi: deps
	bash scripts/mpitest.sh

# The SLURM daemons that clusterdeps starts are stopped again at the end,
# whether the tests pass or not.
# Each part says how long it took. Open MPI's session directories (one per
# mpirun, left in /tmp by a job a test kills) go to a directory of the
# run's, removed at the end.
test: deps clusterdeps
	@status=0; ompi=$$(mktemp -d /tmp/gohorovod-test-ompi-XXXXXX); export OMPI_MCA_orte_tmpdir_base=$$ompi; \
	  for t in vet test-unit test-mpi test-adapters; do s=$$(date +%s); \
	    $(MAKE) --no-print-directory $$t || { status=$$?; break; }; \
	    echo "== make $$t: $$(( $$(date +%s) - s )) s"; done; \
	  rm -rf "$$ompi"; bash scripts/slurm.sh stop >/dev/null 2>&1 || true; exit $$status

# The cluster tests' own needs: torchrun (python3-torch) and a one-node SLURM
# cluster, installed and started as root (scripts/clusterdeps.sh).
clusterdeps:
	@bash scripts/clusterdeps.sh

# The adapters are Go modules of their own (gonum's optimize and gorgonia stay
# out of the core module's dependencies), so ./... above skips them: vet and
# test each, then run the gonum adapter's multi-process test under mpirun, and
# the GoMLX adapter's under mpirun and under gohorovodrun --gloo.
ADAPTERS = examples/adapters/gonumopt examples/adapters/gorgoniaopt examples/adapters/gomlxopt
test-adapters:
	@for m in $(ADAPTERS); do echo "== $$m"; (cd $$m && $(GO) vet ./... && $(GO) test -race -count=1 ./...) || exit 1; done
	@# The CNN example's short training runs (plain, and stopped and resumed
	@# from a checkpoint), too slow under -race.
	cd examples/adapters/gomlxopt && $(GO) test -count=1 -run 'TestTrainNP2|TestCheckpointResume' ./mnistcnn
	@# Decided when the recipe runs, not when make starts: on a fresh machine
	@# make deps installs mpicc during this very run.
	@if command -v mpicc >/dev/null 2>&1; then \
	  mkdir -p bin/mpitest && \
	  (cd examples/adapters/gonumopt && $(GO) vet -tags mpi ./... && $(GO) test -tags mpi -c -o ../../../bin/mpitest/gonumopt.test .) && \
	  for np in 2 4; do echo "=== mpirun -np $$np gonumopt"; timeout 300 scripts/mpirun.sh $$np bin/mpitest/gonumopt.test -test.run MPI || exit 1; done; \
	  (cd examples/adapters/gomlxopt && $(GO) vet -tags mpi ./... && $(GO) test -tags mpi -c -o ../../../bin/mpitest/gomlxopt.test .) && \
	  for np in 2 3; do echo "=== mpirun -np $$np gomlxopt"; timeout 300 scripts/mpirun.sh $$np bin/mpitest/gomlxopt.test -test.run MPI || exit 1; done; \
	else echo "test-adapters: mpicc not found: the adapters' MPI tests skipped"; fi
	@# The embedded transport needs no MPI: the GoMLX adapter's test at np 2.
	@mkdir -p bin/mpitest
	CGO_ENABLED=0 $(GO) build -o bin/mpitest/gohorovodrun ./cmd/gohorovodrun
	cd examples/adapters/gomlxopt && CGO_ENABLED=0 $(GO) vet -tags gloo ./... && CGO_ENABLED=0 $(GO) test -tags gloo -c -o ../../../bin/mpitest/gomlxopt_gloo.test .
	timeout 300 bin/mpitest/gohorovodrun --gloo -np 2 bin/mpitest/gomlxopt_gloo.test -test.run MPI -test.timeout 240s
	@# The CNN example itself under the launcher, briefly: rank 0 must report its epoch.
	cd examples/adapters/gomlxopt && CGO_ENABLED=0 $(GO) build -tags gloo -o ../../../bin/mpitest/mnistcnn ./mnistcnn
	timeout 300 bin/mpitest/gohorovodrun --gloo -np 2 bin/mpitest/mnistcnn --epochs 1 --train-limit 640 --test-limit 200 --threads 1 | grep 'epoch 1: loss'

# The MPI tests linked against MPICH (installed beside Open MPI: apt-get
# install -y mpich libmpich-dev), under MPICH's own launcher, at np 2 (MPICH
# is very slow oversubscribed). gompi hard-codes Open MPI's paths, hence the
# flags; our cgo layer finds MPICH through pkg-config (the mpich tag).
MPICH_ENV = CGO_CFLAGS=-I/usr/include/x86_64-linux-gnu/mpich CGO_LDFLAGS="-Wl,--as-needed -lmpich"
test-mpich:
	@command -v mpirun.mpich >/dev/null || { echo "test-mpich: MPICH is not installed: apt-get install -y mpich libmpich-dev"; exit 1; }
	@mkdir -p bin/mpich
	$(MPICH_ENV) $(GO) test -tags mpi,mpich -c -o bin/mpich/mpi.test ./mpi
	$(MPICH_ENV) $(GO) test -tags mpi,mpich -c -o bin/mpich/comm.test ./runtime/comm
	timeout 300 mpirun.mpich -np 2 bin/mpich/mpi.test
	timeout 300 mpirun.mpich -np 2 bin/mpich/comm.test -test.run '^TestMPI$$'

bench: deps build
	$(GO) test -run '^$$' -bench . -benchmem ./tensor/
	bin/hvdbench -np 2
	$(if $(TAGS),bash scripts/mpirun.sh $(NP),) bin/synthetic
	@# Across nodes: an emulated cluster of network namespaces (root only).
	@if [ "$$(id -u)" -eq 0 ]; then \
	  bin/nodebench -nodes 2,3 -rate 1gbit -cases 64MiB,resnet50 && \
	  bin/nodebench -nodes 2 -rate 100mbit -cases 4KiBx1000,4MB -paths embedded,mpirun,gloo -iters 5 && \
	  bin/nodebench -nodes 2 -rate 10gbit -cases 64MiB -paths embedded,mpirun,raw-mpi-ring,gloo && \
	  bin/nodebench -nodes 2 -ranks-per-node 2 -rate 1gbit -cases 64MiB -paths embedded,embedded-hier; \
	else echo "bench: nodebench needs root (network namespaces): skipped"; fi

# The demo trains an MLP on the real MNIST digits, data parallel on NP
# processes through the launcher (examples/mnist: rank 0 prints loss, test
# accuracy and samples/s per epoch). The two binaries are rebuilt with the
# mpi tag here because TAGS is decided before make deps installs MPI on a
# fresh machine.
DEMO_EPOCHS ?= 3
demo: deps build
	$(GO) build -tags mpi -o bin/ ./cmd/gohorovodrun ./examples/mnist
	bin/gohorovodrun -np $(NP) bin/mnist --epochs $(DEMO_EPOCHS)

clean:
	rm -rf bin
