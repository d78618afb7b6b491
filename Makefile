# Developer shortcuts. `make build` compiles the extension in place (pyhorovod/_core*.so) using
# BUILD_DIR, so that several checkouts or helpers can build side by side.
PYTHON ?= python3
BUILD_DIR ?= build/cmake
JOBS ?= 2

.PHONY: build test cxx-test clean

build:
	cmake -S . -B $(BUILD_DIR) -DPython_EXECUTABLE=$$(which $(PYTHON)) -DCMAKE_BUILD_TYPE=Release \
	      -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$(abspath $(BUILD_DIR))/lib > /dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS)
	@so=$$(ls $(BUILD_DIR)/lib/_core*.so) && cp $$so pyhorovod/.core.tmp.so && mv pyhorovod/.core.tmp.so pyhorovod/$$(basename $$so)

cxx-test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 120

clean:
	rm -rf build build-* pyhorovod/_core*.so
