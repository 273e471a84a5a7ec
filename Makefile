# The two commands of the README. Each one installs what is missing, configures, builds, runs.
# PRESET=release (default) builds for this machine's CPU and never fails on a warning;
# PRESET=dev is the same with warnings as errors (developers, CI); PRESET=portable builds
# binaries for any x86-64-v2 CPU. See "CPU targets" in the README.
PRESET ?= release
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)

.PHONY: demo test build setup bench bench-rounds format format-check layout-check clean check-arch fuzz fuzz-regression

setup:
	@scripts/setup.sh

build: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS)

# A simulated federation of 8 hospitals on Fashion-MNIST with label skew (Dirichlet 0.5):
# the real server and 8 real client daemons over loopback mutual TLS with throwaway
# development certificates, then the centralized baseline on the same data and model.
# Everything lands in $(DEMO_OUT) (replaced on every run). See docs/sim.md.
DEMO_OUT ?= build/demo
DASHBOARD_PORT ?= 8443
DASHBOARD_LINGER ?= 60
demo: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS) --target fedcore-sim
	$(BUILD)/sim/fedcore-sim --dataset fashion-mnist --partition dirichlet:0.5 --clients 8 \
	  --model mlp --rounds 10 --local-epochs 1 --batch 32 --lr 0.05 --momentum 0.9 \
	  --seed 1 --baseline --out $(DEMO_OUT) --dashboard-port $(DASHBOARD_PORT) \
	  --dashboard-linger $(DASHBOARD_LINGER)

test: build
	ctest --preset $(PRESET) -j $(JOBS)

bench: PRESET = release
bench:
	@scripts/setup.sh --bench
	cmake --preset release
	cmake --build --preset release -j $(JOBS) --target bench_train_step
	bench/compare_torch.sh build/release

# Issue 20's round-time table (9 cells, 100k to 10M parameters, 2 to 32 clients) against its
# targets and this machine's TLS floor, median of REPEATS runs (default 3; bench/round_targets.py).
bench-rounds: PRESET = release
bench-rounds:
	@scripts/setup.sh
	cmake --preset release
	cmake --build --preset release -j $(JOBS) --target federation_bench
	bench/round_targets.py --build build/release

# libFuzzer targets with ASan + UBSan (clang; fuzz/, docs/fuzzing.md), in build/fuzz. `make fuzz`
# runs each for FUZZ_SECONDS on a copy of its corpus; `make fuzz-regression` runs each once
# over its committed corpus (what CI runs). Either fails if any target crashes.
FUZZ_SECONDS ?= 60
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) scripts/fuzz.sh

fuzz-regression:
	JOBS=$(JOBS) scripts/fuzz.sh --regression

# Compile the Eigen-using code at the x86-64-v2 baseline and with AVX-512 (x86-64-v4), with
# warnings as errors, whatever this machine's CPU is (CI runs it after the dev build).
check-arch: setup
	scripts/compile_check.sh --reference $(BUILD) x86-64-v2 x86-64-v4

format:
	git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

# Fails, naming the files, when any C++ file differs from what `make format` would write.
format-check:
	git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run -Werror

# Includes from the repository root, libraries depending downwards, namespaces = folders.
layout-check:
	python3 scripts/check_layout.py

clean:
	rm -rf build
