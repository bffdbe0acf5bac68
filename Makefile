# The two set-up commands of the README:
#   make demo   installs dependencies, builds, runs the demo composition on the embedded sandboxd
#   make test   installs dependencies, builds, runs every suite ("N passed, N failed")
#   make fuzz-long  every fuzzer for at least 10 M executions (fuzz/run-long.sh; CI runs them briefly)
.PHONY: deps build demo test bench clean fuzz-long
deps:
	@scripts/install-deps.sh
build: deps
	@cmake -S . -B build >/dev/null && cmake --build build -j2
demo: build
	@build/bin/moonbox run examples/demo/compose.lua examples/demo/demo.lua
test: deps
	@scripts/test.sh
bench: build
	@bench/run.sh
fuzz-long: deps
	@fuzz/run-long.sh
clean:
	rm -rf build build-asan build-fuzz
