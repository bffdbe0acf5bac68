-- moonbox as a rock: `luarocks --lua-version=5.4 make` (in the checkout) builds the project with
-- its CMake (the C module moonbox.core, the moonbox program, sandboxd with its init, mbwrap) and
-- installs into the rock tree: the Lua modules and the shipped policies (moonbox.policies.<concern>)
-- on its Lua 5.4 paths, the programs in its bin/ (mbwrap too: moonbox finds sandboxd and mbwrap
-- next to itself, or next to the Lua tree's prefix). The embedding library and its headers are
-- left to `cmake --install`. Debian packages the build needs: scripts/install-deps.sh. Offline
-- (no rock server): luarocks make --deps-mode=none (lua-cjson then comes from Debian's
-- lua-cjson). CMAKE_BUILD_PARALLEL_LEVEL=2 in the environment builds on two cores.
rockspec_format = "3.0"
package = "moonbox"
version = "dev-1"
source = { url = "git+file://." }
description = {
  summary = "Lua-scriptable runtime that moves a harness's files, commands and terminals into an E2B sandbox",
  detailed = "A C core (libuv loop driving libcurl) with Lua 5.4 coroutines whose calls look blocking but never block the loop.",
}
dependencies = { "lua >= 5.4, < 5.5", "lua-cjson" }
build = {
  type = "cmake",
  variables = {
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    MB_ROCK = "ON",                       -- programs and Lua modules only; no tests or benches
    MB_INSTALL_LMOD = "lua",              -- luarocks deploys $(PREFIX)/lua to the tree's Lua path
    MB_INSTALL_CMOD = "lib",              -- and $(PREFIX)/lib to its C module path
    MB_INSTALL_HELPERS = "bin",           -- mbwrap beside moonbox and sandboxd
  },
}
