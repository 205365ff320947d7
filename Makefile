# Tidemark's build. `make test` is the README's test command and what CI runs.
GO        ?= go
STATICCHECK_VERSION ?= v0.8.2
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
PKGS      := ./...

.PHONY: test fmt-check vet static lint fuzz bench demo

test: fmt-check vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# A static build, and a 32-bit one (int is 32 bits there).
static:
	CGO_ENABLED=0 $(GO) build $(PKGS)
	CGO_ENABLED=0 GOARCH=386 $(GO) build $(PKGS)

lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

# Every fuzz target in the module, FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# DESIGN §6 (docs/performance.md): the tracker's micro-benchmarks (BENCHTIME each, BENCHCOUNT
# runs, medians) and the end-to-end benchmarks of ./bench (one run each: they size themselves),
# then one table (bench/cmd/benchtable). Raw outputs go to BENCHOUT (a temporary directory unless
# set); benchtable fails if a run failed.
bench:
	@set -e; out=$${BENCHOUT:-$$(mktemp -d)}; mkdir -p "$$out"; \
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $${BENCHCOUNT:-5} ./tracker/ | tee "$$out/tracker.txt"; \
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./bench/ | tee "$$out/bench.txt"; \
	$(GO) run ./bench/cmd/benchtable "$$out/tracker.txt" "$$out/bench.txt"; \
	echo "raw outputs: $$out"

# The README's first command: the payouts service on an embedded kfake cluster.
demo:
	$(GO) run ./examples/payouts

# Seeded chaos runs on the crash runner (kfaketest/conformance, TestChaos): N seeds from SEED
# (default 1,000 from 1); SEED alone replays that one seed, as a failing run says.
.PHONY: chaos
chaos:
	$(GO) test -race -count=1 -timeout 48h -v -run '^TestChaos$$' ./kfaketest/conformance \
		-chaos.seed=$(or $(SEED),1) -chaos.n=$(or $(N),$(if $(SEED),1,1000))

# The conformance suite (kfaketest/conformance, TestConformance) against a real Apache Kafka:
# kfaketest/realkafka/run.sh fetches Kafka with Maven into a cache outside the repository, starts
# one KRaft node on loopback ports and sets KAFKA_BROKERS (docs/realkafka.md). The runtime's own
# TestCrash* tests run on kfake only (kfaketest.New ignores KAFKA_BROKERS): make test runs them,
# and the suite's SIGKILL scenarios are their real-broker counterparts.
# TIDEMARK_KAFKA_OPTIONAL=1 turns "Kafka cannot be obtained" into one SKIPPED line and success.
REAL_KAFKA := kfaketest/realkafka/run.sh
.PHONY: test-real test-real-cluster
REAL_TEST  := kfaketest/realkafka/gotest.sh
test-real:
	$(REAL_KAFKA) -- $(REAL_TEST) ./kfaketest/conformance/ '^TestConformance$$' 30m

# The same suite, then the leader-move and rebalance scenarios of kfaketest/realkafka, against
# three KRaft nodes (topics with replication factor 3, min.insync.replicas 2).
test-real-cluster:
	$(REAL_KAFKA) --brokers 3 -- sh -c 'rc=0; \
		$(REAL_TEST) ./kfaketest/conformance/ "^TestConformance$$" 30m || rc=1; \
		$(REAL_TEST) ./kfaketest/realkafka/ "^TestCluster" 10m || rc=1; exit $$rc'
