# The two commands of the README. Each one installs what is missing, configures, builds, runs.
PRESET ?= release
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)

.PHONY: demo test build setup bench format clean

setup:
	@scripts/setup.sh

build: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS)

# Until the federation lands: one epoch of the McMahan CNN on Fashion-MNIST, centralized.
demo: build
	$(BUILD)/sim/fedcore-train --data fashion-mnist --model '{"type":"cnn"}' \
	  --epochs 1 --batch 32 --lr 0.05 --momentum 0.9 --threads $(JOBS)

test: build
	ctest --preset $(PRESET) -j $(JOBS)

bench: PRESET = release
bench:
	@scripts/setup.sh --bench
	cmake --preset release
	cmake --build --preset release -j $(JOBS) --target bench_train_step
	bench/compare_torch.sh build/release

format:
	git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	rm -rf build
