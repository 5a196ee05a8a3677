# Thin wrapper over CMake; the two README commands are `make demo` and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PLAN ?= $(BUILD_DIR)/stories260K.plan
MODEL ?= tests/data/stories260K

.PHONY: all deps configure build demo test clean format

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

format:
	git ls-files '*.cc' '*.h' '*.cpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
