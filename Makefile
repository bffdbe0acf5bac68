# The two set-up commands of the README:
#   make demo   installs dependencies, builds, runs the demo composition on the embedded sandboxd
#   make test   installs dependencies, builds, runs every suite ("N passed, N failed")
# and: make install [PREFIX=/usr/local]   (cmake --install: libmoonbox, headers, moonbox.pc,
#      the Lua modules, policies and moonbox.core on the prefix's Lua 5.4 paths, the programs)
#      make fuzz-long  every fuzzer for at least 10 M executions (fuzz/run-long.sh; CI runs them briefly)
#      make test-vm    the cgroup v2 suite alone: sandboxd in a cgroup-v2-only VM (tests/vm/run.sh; make test runs it too)
PREFIX ?= /usr/local
.PHONY: deps build demo test test-vm bench soak install clean fuzz-long
deps:
	@scripts/install-deps.sh
# The compiler's output goes to build/build.log (shown when something fails).
build: deps
	@mkdir -p build && printf 'build: cmake -S . -B build && cmake --build build (log: build/build.log) ... ' && \
	  if { cmake -S . -B build && cmake --build build -j2; } >build/build.log 2>&1; then echo ok; \
	  else echo failed; tail -40 build/build.log; exit 1; fi
demo: build
	@build/bin/moonbox run examples/demo/compose.lua examples/demo/demo.lua
test: deps
	@scripts/test.sh
test-vm: build
	@tests/vm/run.sh
bench: build
	@bench/run.sh
# One Lua state, 10,000 mixed operations on the embedded sandboxd (tests/soak/soak.lua).
soak: build
	@build/bin/moonbox run examples/demo/compose.lua tests/soak/soak.lua 10000
install: build
	@cmake --install build --prefix "$(PREFIX)"
fuzz-long: deps
	@fuzz/run-long.sh
clean:
	rm -rf build build-asan build-fuzz
