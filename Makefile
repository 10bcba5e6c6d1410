# SPDX-License-Identifier: GPL-3.0-or-later
# The README's two commands, and a few more.  CMake does the building.
#   make run    install missing packages, build, run the main job
#   make test   install missing packages, torch and the engine, build, run every test
PRESET ?= dev
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all deps test-deps build run test test-asan bench clean format

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake --preset $(PRESET) >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job runs on an optimised build: the harness's statistics
# (bootstrap) are part of every iteration's wall time.
run:
	@$(MAKE) --no-print-directory build PRESET=release
	@scripts/main-job.sh build/release

# What the tests need beyond the Debian packages, as on CI: the real engine
# (llama-server, built once per box into ~/.cache/atb-engine) and PyTorch
# (.venv-torch/).  Both are idempotent and print nothing when already there;
# either failing stops `make test` (a test that would skip for want of them
# is not a pass).
test-deps: deps
	@scripts/install-engine-deps.sh
	@scripts/install-torch.sh

# The last lines name every skipped test with its reason, then
# "tests: N passed, N failed, N skipped" (scripts/test-summary.py reads
# ctest's JUnit file: ctest itself counts a skip as passed).
test: build test-deps
	@start=$$(date +%s); rc=0; \
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) \
		--output-junit junit.xml --test-output-size-passed 262144 || rc=$$?; \
	python3 scripts/test-summary.py $(BUILD)/junit.xml $$(( $$(date +%s) - start )); \
	exit $$rc

test-asan:
	$(MAKE) test PRESET=asan

bench:
	$(MAKE) build PRESET=release
	@scripts/run-benches.sh build/release

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build
