# Developer shortcuts. `make build` compiles the extension in place (pyhorovod/_core*.so) using
# BUILD_DIR, so that several checkouts or helpers can build side by side. Its default is the folder
# `pip install -e .` builds in (setup.py: one per interpreter), so the two share one build.
PYTHON ?= python3
BUILD_DIR ?= build/cmake-$(shell $(PYTHON) -c "import sys, sysconfig; print(sys.implementation.cache_tag + '-' + sysconfig.get_platform())")
JOBS ?= 2

.PHONY: build test cxx-test py-test demo elastic-demo allreduce-demo clean

build:
	cmake -S . -B $(BUILD_DIR) -DPython_EXECUTABLE=$$(which $(PYTHON)) -DCMAKE_BUILD_TYPE=Release \
	      -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$(abspath $(BUILD_DIR))/lib > /dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS)
	@so=$$(ls $(BUILD_DIR)/lib/_core*.so) && cp $$so pyhorovod/.core.tmp.so && mv pyhorovod/.core.tmp.so pyhorovod/$$(basename $$so)

# JOBS tests at once: most of their time is waits and the kernel's (thread wake-ups, sockets), not CPU.
cxx-test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 120 -j $(JOBS)

# The README's test command (after set-up): C++ unit tests, then every Python test (multi-process ones
# spawn their ranks with tests/mp.py; the mpirun test is skipped, with the reason, without Open MPI).
test: cxx-test py-test

# The test files that mostly wait (for deadlines, stall timers, a peer that never comes: 0.1-0.45 of a core
# each, measured) run four files at a time in a second pytest run (pytest-xdist, when installed); every
# other file runs one test at a time, as its spinning ranks and timings need. A file's tests stay on one
# worker, in order, and each worker runs one file at a time.
WAITING_TESTS = $(foreach t,reliability_stall reliability_timeouts reliability_network store_pressure secrets \
                  launcher_blame interrupt auto_names collective_errors env_parity,tests/test_$(t).py)
WAITING_WORKERS = $(shell $(PYTHON) -c "import xdist" 2>/dev/null && echo "-n 4 --dist loadfile")

py-test: build
	$(PYTHON) -m pytest -q -rs --durations=25 $(addprefix --ignore=,$(WAITING_TESTS)) tests; one=$$?; \
	$(PYTHON) -m pytest -q -rs --durations=5 $(WAITING_WORKERS) $(WAITING_TESTS); many=$$?; \
	test $$one = 0 && test $$many = 0

# The main job: the Fashion-MNIST CNN trained data-parallel on 4 local ranks through our launcher
# (linear LR scaling with warmup; a few minutes on 2 cores). `allreduce-demo` prints a small busbw table.
demo: build
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m pyhorovod.run -np 4 $(PYTHON) examples/fashion_mnist.py --epochs 2

# The elastic job: the same training through hvd.elastic on 4 workers, one SIGKILLed and one host added
# mid-epoch by the discovery script (examples/elastic_demo.py edits its file), then `demo`'s run without
# elasticity; prints both test accuracies (exit 1 if they are more than 1 point apart).
elastic-demo: build
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) examples/elastic_demo.py --epochs 2

allreduce-demo: build
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m pyhorovod.run -np 4 $(PYTHON) examples/allreduce_demo.py

clean:
	rm -rf build build-* pyhorovod/_core*.so
