# Thin wrapper over CMake; the two README commands are `make demo` and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PLAN ?= $(BUILD_DIR)/stories260K.plan
MODEL ?= tests/data/stories260K

PREFIX ?= /usr/local

.PHONY: all deps configure build demo test test-sanitize clean format install arm64

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/bin/llmc compile $(MODEL) -o $(PLAN)
	$(BUILD_DIR)/bin/llmrt run $(PLAN) -p "Once upon a time" -n 200

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The runtime and its tests under ASan + UBSan in build-asan/ (see the script for what is covered);
# the same clang build holds the libFuzzer targets that `make test` runs (fuzz_smoke).
test-sanitize: deps configure
	JOBS=$(JOBS) NORMAL_BUILD_DIR=$(BUILD_DIR) bash scripts/test-sanitize.sh

# The embeddable runtime: <llmrt/llmrt.h>, libllmrt.{a,so}, find_package(llmrt) (docs/embedding.md).
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX) --component llmrt

# Cross-build the runtime core for arm64 and run its tests under qemu (scripts/cross-arm64.sh).
arm64: build
	bash scripts/cross-arm64.sh $(BUILD_DIR)/arm64 $(BUILD_DIR)

format:
	git ls-files '*.cc' '*.h' '*.cpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
