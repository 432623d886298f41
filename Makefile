# The two set-up commands (see README): `make run` and `make test`. Both install what is missing
# (scripts/install-deps.sh), configure and build first.
PRESET ?= dev
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)
INFERA := $(BUILD_DIR)/src/cli/infera

.PHONY: all deps configure build run test bench asan fuzz clean validate-examples

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake --preset $(PRESET)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# `make run` builds only what it runs: the infera binary. It serves the whole platform from its
# data directory (INFERA_HOME, else ~/.local/share/infera; created on first run from
# examples/platform.yaml): no tracked file is written.
run: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target infera
	$(INFERA) serve

test: build
	$(INFERA) config validate examples/platform.yaml
	$(INFERA) config validate examples/quickstart.yaml
	$(INFERA) config validate examples/multi-region.yaml
	$(INFERA) config validate examples/features.yaml
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout $(CTEST_TIMEOUT) $(CTEST_ARGS)
CTEST_TIMEOUT ?= 300

# The whole suite under address + undefined sanitizers, the `slow` label included (the all-lists
# trace test alone takes ~25 min under them, hence the longer per-test timeout). Every harness
# that starts infera fails on a sanitizer report in its output (tests/fakes/sanitizer.sh).
asan:
	$(MAKE) test PRESET=asan CTEST_TIMEOUT=3600

# `make fuzz`: the libFuzzer targets (clang, build/fuzz), each run for FUZZ_SECONDS; prints
# executions and findings per target (tests/fuzz/README.md). `make test` runs them on their corpora.
FUZZ_SECONDS ?= 60
fuzz:
	$(MAKE) configure PRESET=fuzz
	cmake --build build/fuzz -j $(JOBS) --target infera_fuzzers
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh build/fuzz

bench: deps
	cmake --preset release
	cmake --build build/release -j $(JOBS)
	bash bench/run_all.sh build/release

clean:
	rm -rf build
