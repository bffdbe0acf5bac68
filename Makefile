# The two set-up commands of the README:
#   make demo   installs dependencies, builds, runs the demo composition on the embedded sandboxd
#   make test   installs dependencies, builds, runs every suite ("N passed, N failed")
.PHONY: deps build demo test bench soak clean
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
# One Lua state, 10,000 mixed operations on the embedded sandboxd (tests/soak/soak.lua).
soak: build
	@build/bin/moonbox run examples/demo/compose.lua tests/soak/soak.lua 10000
clean:
	rm -rf build build-asan build-fuzz
