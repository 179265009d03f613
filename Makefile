# leasefence — see README.md. `make run` starts a three-node cluster on
# loopback; `make test` runs the whole suite.

GO        ?= go
BIN       := bin
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTO_FILES := $(shell find . -name '*.proto' -not -path './.git/*' | sort)
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin

.PHONY: all build proto proto-tools test test-short vet fmt run clean fuzz docs-diagram

all: build

# HARNESS is the fault-injection harness's own module (jepsen/README.md),
# with a replace to this one: gonum/plot and porcupine stay out of the root
# go.mod. Targets that build, vet or test "everything" cover both modules.
HARNESS := jepsen

build:
	$(GO) build -o $(BIN)/ ./cmd/...
	cd $(HARNESS) && $(GO) build -o $(abspath $(BIN))/ ./cmd/...

proto-tools:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 2; }
	GOBIN=$(GOBIN_DIR) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(GOBIN_DIR) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

# proto regenerates every *.pb.go from the .proto files beside them.
proto: proto-tools
	PATH=$(GOBIN_DIR):$$PATH protoc -I . \
		--go_out=. --go_opt=module=github.com/leasefence/leasefence \
		--go-grpc_out=. --go-grpc_opt=module=github.com/leasefence/leasefence \
		$(PROTO_FILES)

vet:
	$(GO) vet ./...
	cd $(HARNESS) && $(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

# test: the whole suite with the race detector (scripts/gotest.sh repeats
# what failed at the end of its output); then, in a plantedbugs build,
# the tests that show a planted defect caught without the harness (named
# *Planted*, *CheckCatches* or *PropertyCatches*); then every fuzz target
# for 3 s.
test: vet
	GO=$(GO) ./scripts/gotest.sh -race -count=1 -timeout 14m ./...
	cd $(HARNESS) && GO=$(GO) $(abspath scripts/gotest.sh) -race -count=1 -timeout 14m ./...
	$(GO) test -count=1 -tags plantedbugs -run 'Planted|CheckCatches|PropertyCatches' ./fsm/ ./client/ ./cluster/ ./internal/e2e/
	./scripts/fuzz.sh 3s

# fuzz explores every fuzz target for FUZZTIME each (default 5m).
FUZZTIME ?= 5m
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

test-short:
	$(GO) test -short -count=1 ./...
	cd $(HARNESS) && $(GO) test -short -count=1 ./...

run: build
	./scripts/run-cluster.sh

# docs-diagram renders docs/how-it-works.dot with graphviz (Debian's package,
# installed when missing).
docs-diagram:
	@command -v dot >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz; }
	dot -Tpng -Gdpi=110 docs/how-it-works.dot -o docs/how-it-works.png
	dot -Tsvg docs/how-it-works.dot -o docs/how-it-works.svg

clean:
	rm -rf $(BIN) run-data

.PHONY: demo test-fence bench-fence

# demo runs the fencing demo with real processes: a three-node cluster, the
# fencedkv store, and a worker frozen with SIGSTOP before its write; once
# with fencing, once unfenced (the control run). See README.md, "Demo".
demo: build
	$(BIN)/fencedemo --bin-dir $(BIN)

# embedded-demo runs three instances of examples/embedded (an application
# embedding a node) that elect one writer of a fenced report; it freezes,
# kills -9 and restarts them (scripts/embedded-demo.sh, docs/EMBEDDING.md).
.PHONY: embedded-demo
embedded-demo:
	./scripts/embedded-demo.sh

# test-fence runs the fencing library, fencedkv and the demo's tests. The
# PostgreSQL tests need LEASEFENCE_TEST_POSTGRES_DSN (.ci/run starts a server).
test-fence:
	$(GO) test -race -count=1 ./fence/... ./internal/demo/

# bench-fence measures a fenced write against an unfenced one on bbolt and SQLite.
bench-fence:
	$(GO) test -run '^$$' -bench 'BoltWrite|SQLiteWrite' -benchtime 2000x ./fence/fencebolt/ ./fence/fencesql/

.PHONY: bench

# bench runs the FSM micro-benchmarks, then bench/etcd-compare.sh: a
# three-node leasefence and a three-node etcd on loopback, the same
# acquire/release cycle at 1 and 64 clients, and the ratios. Not part of
# `make test`; see docs/PERFORMANCE.md (DURATION, ROUNDS, ROWS, LONG tune it).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./fsm/
	./bench/etcd-compare.sh

.PHONY: image

# image builds static leased and leasectl (CGO_ENABLED=0) into a build
# context under bin/image and the FROM scratch image deploy/Dockerfile from
# it. IMAGE names the tag; deploy/docker-compose.yml runs it (deploy/README.md).
IMAGE         ?= leasefence:dev
IMAGE_CONTEXT := $(BIN)/image
image:
	rm -rf $(IMAGE_CONTEXT)
	mkdir -p $(IMAGE_CONTEXT)/rootfs/data
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags '-s -w' -o $(IMAGE_CONTEXT)/rootfs/ ./cmd/leased ./cmd/leasectl
	cp deploy/Dockerfile $(IMAGE_CONTEXT)/Dockerfile
	docker build -t $(IMAGE) $(IMAGE_CONTEXT)

.PHONY: jepsen jepsen-bin jepsen-quick jepsen-netns jepsen-docker jepsen-soak

# The fault-injection harness (jepsen/README.md): real leased nodes, a real
# fencedkv and real worker processes on loopback (or in network namespaces),
# faults on a seeded schedule, checkers over the recorded history. Results
# under results/jepsen/. SEED=N picks the seed of the schedule and workers.
JEPSEN_SEED    ?= $(or $(SEED),1)
JEPSEN_TIME    ?= 10m
JEPSEN_NEMESIS ?= all
JEPSEN_NET     ?= proxy
JEPSEN_ARGS    ?=

# jepsen-bin builds leased and fencedkv from the root module and jepsen
# from the harness's module, all into BIN.
jepsen-bin:
	$(GO) build -o $(BIN)/ ./cmd/leased ./cmd/fencedkv
	cd $(HARNESS) && $(GO) build -o $(abspath $(BIN))/ ./cmd/jepsen

# jepsen is one long run: JEPSEN_TIME of workload under JEPSEN_NEMESIS, in
# JEPSEN_NET mode (proxy, or netns as root). Exit 0 only if every checker is
# valid.
jepsen: jepsen-bin
	@if [ "$(JEPSEN_NET)" = netns ] && ! { command -v ip && command -v iptables; } >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 iptables; fi
	$(BIN)/jepsen --bin-dir $(BIN) --seed $(JEPSEN_SEED) --time $(JEPSEN_TIME) \
		--nemesis $(JEPSEN_NEMESIS) --net $(JEPSEN_NET) $(JEPSEN_ARGS)

# jepsen-quick is the suite .ci/run runs, on 3 nodes, 6 workers and 3
# resources to keep it short: fenced runs (process, network, clock,
# drift-edge and combined faults, realistic ttls, realistic ttls on slow
# disks, the leader's lost tail) and one with restores from a backup that
# must pass every required checker, the --unfenced control that must be
# caught, and one short run per planted bug (a plantedbugs build), each of
# which must be caught by a checker the README's table names, within three
# seeds. About 34 minutes (41 scenarios). The slow-disk scenarios mount a
# FUSE file system: root and /dev/fuse.
jepsen-quick: jepsen-bin
	$(BIN)/jepsen suite --bin-dir $(BIN) --seed $(JEPSEN_SEED) --nodes 3 --workers 6 --resources 3 $(JEPSEN_ARGS)

# jepsen-netns is one fenced run in namespace mode (root): a network
# namespace per node, partitions as iptables DROP rules (no RST, so a cut link
# is silent), under the partition nemeses, a silent leader (every packet to
# and from its namespace dropped) and a leader kill. .ci/run runs it
# after jepsen-quick. Exit 0 only if every checker is valid.
JEPSEN_NETNS_TIME    ?= 45s
JEPSEN_NETNS_NEMESIS ?= partition-leader,partition-halves,partition-oneway,silent-leader,kill-leader
jepsen-netns: jepsen-bin
	@if ! { command -v ip && command -v iptables; } >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 iptables; fi
	$(BIN)/jepsen --bin-dir $(BIN) --seed $(JEPSEN_SEED) --time $(JEPSEN_NETNS_TIME) --net netns \
		--nodes 3 --workers 6 --resources 3 --nemesis $(JEPSEN_NETNS_NEMESIS) $(JEPSEN_ARGS)

# jepsen-docker is one short fenced run in docker mode (root and a Docker
# engine): the nodes are containers of the image `make image` builds (IMAGE;
# nothing is pulled) on a private network the harness creates and removes;
# kills are docker kill, pauses docker pause, partitions and a silent leader
# iptables rules in a container's namespace. .ci/run runs it. Without root or
# a Docker engine it is skipped with a message, except under CI=true, where
# that fails. About a minute after the image build.
JEPSEN_DOCKER_TIME    ?= 40s
JEPSEN_DOCKER_NEMESIS ?= kill,kill-leader,pause-leader,partition-halves,silent-leader
jepsen-docker: jepsen-bin
	@why=""; [ "$$(id -u)" = 0 ] || why="not root"; docker info >/dev/null 2>&1 || why="no Docker engine answers"; \
	if [ -n "$$why" ]; then \
		if [ "$(CI)" = true ]; then echo "jepsen-docker: $$why (CI=true: failing)" >&2; exit 1; fi; \
		echo "jepsen-docker: $$why: skipped" >&2; exit 0; fi; \
	if ! { command -v nsenter && command -v iptables; } >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq util-linux iptables; fi; \
	$(MAKE) --no-print-directory image IMAGE=$(IMAGE) && \
	$(BIN)/jepsen --bin-dir $(BIN) --seed $(JEPSEN_SEED) --time $(JEPSEN_DOCKER_TIME) --net docker --image $(IMAGE) \
		--nodes 3 --workers 6 --resources 3 --nemesis $(JEPSEN_DOCKER_NEMESIS) $(JEPSEN_ARGS)

# jepsen-soak runs SOAK_RUNS fenced runs of SOAK_TIME with every nemesis
# (JEPSEN_NEMESIS) in SOAK_NET mode (netns: root), seeds JEPSEN_SEED,
# JEPSEN_SEED+1, ..., into SOAK_DIR, then writes SOAK_DIR/soak.md: a table
# with a row per run (seed, result, operations, faults by kind, anomalies)
# and their totals, for jepsen/README.md. Every run runs; the exit status is
# 1 if any did not pass. The default is the issue's soak: 20 × 5 minutes.
SOAK_RUNS ?= 20
SOAK_TIME ?= 5m
SOAK_NET  ?= netns
SOAK_DIR  ?= results/soak-$(shell date -u +%Y%m%dT%H%M%S)
jepsen-soak: jepsen-bin
	@if [ "$(SOAK_NET)" = netns ] && ! { command -v ip && command -v iptables; } >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 iptables; fi
	@dir="$(SOAK_DIR)"; mkdir -p "$$dir"; status=0; \
	for i in $$(seq 0 $$(($(SOAK_RUNS) - 1))); do \
		$(BIN)/jepsen --bin-dir $(BIN) --results "$$dir" --seed $$(($(JEPSEN_SEED) + i)) --time $(SOAK_TIME) \
			--nemesis $(JEPSEN_NEMESIS) --net $(SOAK_NET) $(JEPSEN_ARGS) || status=1; \
	done; \
	$(BIN)/jepsen soak-table "$$dir" > "$$dir/soak.md" || status=2; \
	echo; echo "$(SOAK_RUNS) runs × $(SOAK_TIME), $(SOAK_NET) mode, nemesis $(JEPSEN_NEMESIS): $$dir/soak.md"; cat "$$dir/soak.md"; \
	exit $$status

.PHONY: certs

# certs writes development certificates for mutual TLS into certs/ (git-
# ignored) with Go's crypto only: ca.crt/ca.key, a peer certificate per node
# n1..n3 (SANs 127.0.0.1, ::1, localhost and the URI leasefence://peer) and a
# client certificate client.crt without the peer marker. See README.md,
# "Securing a cluster".
certs:
	$(GO) run ./cmd/certgen --dir certs --nodes n1,n2,n3 --clients client
