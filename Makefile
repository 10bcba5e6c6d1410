# SPDX-License-Identifier: GPL-3.0-or-later
# The README's two commands, and a few more.  CMake does the building.
#   make run    install missing packages, build, run the main job
#   make test   install missing packages, build, run every test
PRESET ?= dev
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all deps build run test test-asan bench clean format

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

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-asan:
	$(MAKE) test PRESET=asan

bench:
	$(MAKE) build PRESET=release
	@scripts/run-benches.sh build/release

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build
