-- moonbox as a rock: `luarocks make` (in the checkout) builds the C module moonbox.core and
-- installs the Lua modules and the shipped policies (moonbox.policies.<concern>) on the rock
-- tree's Lua 5.4 paths. sandboxd and mbwrap are C programs built by CMake: with the rock, set
-- MOONBOX_SANDBOXD and MOONBOX_MBWRAP (or use E2B's cloud), or use `cmake --install` instead.
-- The module list is checked against the tree by spec/install_spec.lua. Offline (no rock
-- server): luarocks make --deps-mode=none (lua-cjson then comes from Debian's lua-cjson).
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
  type = "builtin",
  modules = {
    ["moonbox.core"] = {
      sources = {
        "core/errors.c",
        "core/b64.c",
        "core/connect.c",
        "core/frames.c",
        "core/procstream.c",
        "core/rpc_json.c",
        "core/gen/envd/process.pb-c.c",
        "core/gen/envd/filesystem.pb-c.c",
        "core/loop.c",
        "core/http.c",
        "core/fdout.c",
        "core/pstream.c",
        "core/pstream_local.c",
        "core/ignore.c",
        "core/sync_walk.c",
        "core/sync_tree.c",
        "core/sync_archive.c",
        "core/lua_codec.c",
        "core/lua_host.c",
        "core/lua_http.c",
        "core/lua_loop.c",
        "core/lua_moonbox.c",
        "core/lua_proc.c",
        "core/lua_procstream.c",
        "core/lua_rpc.c",
        "core/lua_sync.c",
        "core/lua_util.c",
        "core/lua_egress.c",
        "core/lua_tty.c",
        "sandboxd/egress_rules.c",   -- sandboxd's egress decision (core.egress)
        "sandboxd/transforms.c",     -- its per-host request transforms (network.rules)
        "sandboxd/sniff.c",          -- its host-name rules (as the egress proxy reads names)
      },
      defines = { "_GNU_SOURCE" },
      incdirs = { "core", "core/include", "core/gen", "sandboxd" },
      -- libuv, libcurl, OpenSSL, jansson, protobuf-c and libarchive from the compiler's
      -- standard paths (Debian: libuv1-dev libcurl4-openssl-dev libssl-dev libjansson-dev
      -- libprotobuf-c-dev libarchive-dev; libutil for openpty)
      libraries = { "uv", "curl", "crypto", "jansson", "protobuf-c", "archive", "util" },
    },
    ["moonbox.cli"] = "lua/moonbox/cli.lua",
    ["moonbox.cli.network"] = "lua/moonbox/cli/network.lua",
    ["moonbox.cli.secret"] = "lua/moonbox/cli/secret.lua",
    ["moonbox.cli.sandbox"] = "lua/moonbox/cli/sandbox.lua",
    ["moonbox.compose"] = "lua/moonbox/compose.lua",
    ["moonbox.consumers.bash"] = "lua/moonbox/consumers/bash.lua",
    ["moonbox.consumers.lsp"] = "lua/moonbox/consumers/lsp.lua",
    ["moonbox.consumers.terminal"] = "lua/moonbox/consumers/terminal.lua",
    ["moonbox.e2b.api"] = "lua/moonbox/e2b/api.lua",
    ["moonbox.e2b.client"] = "lua/moonbox/e2b/client.lua",
    ["moonbox.e2b.endpoints"] = "lua/moonbox/e2b/endpoints.lua",
    ["moonbox.e2b.envd"] = "lua/moonbox/e2b/envd.lua",
    ["moonbox.e2b"] = "lua/moonbox/e2b/init.lua",
    ["moonbox.e2b.launcher"] = "lua/moonbox/e2b/launcher.lua",
    ["moonbox.e2b.owner"] = "lua/moonbox/e2b/owner.lua",
    ["moonbox.e2b.sandbox"] = "lua/moonbox/e2b/sandbox.lua",
    ["moonbox.errors"] = "lua/moonbox/errors.lua",
    ["moonbox.fs.e2b"] = "lua/moonbox/fs/e2b.lua",
    ["moonbox.fs.lock"] = "lua/moonbox/fs/lock.lua",
    ["moonbox.fs.local"] = "lua/moonbox/fs/local.lua",
    ["moonbox.fs.paths"] = "lua/moonbox/fs/paths.lua",
    ["moonbox.fs.service"] = "lua/moonbox/fs/service.lua",
    ["moonbox.http"] = "lua/moonbox/http.lua",
    ["moonbox.ids"] = "lua/moonbox/ids.lua",
    ["moonbox"] = "lua/moonbox/init.lua",
    ["moonbox.policies"] = "lua/moonbox/policies.lua",
    ["moonbox.policy.composition"] = "lua/moonbox/policy/composition.lua",
    ["moonbox.policy.env"] = "lua/moonbox/policy/env.lua",
    ["moonbox.policy.lifecycle"] = "lua/moonbox/policy/lifecycle.lua",
    ["moonbox.policy.network"] = "lua/moonbox/policy/network.lua",
    ["moonbox.policy.rules"] = "lua/moonbox/policy/rules.lua",
    ["moonbox.policy.schema"] = "lua/moonbox/policy/schema.lua",
    ["moonbox.policy.source"] = "lua/moonbox/policy/source.lua",
    ["moonbox.policy.timeouts"] = "lua/moonbox/policy/timeouts.lua",
    ["moonbox.proc"] = "lua/moonbox/proc.lua",
    ["moonbox.procstream"] = "lua/moonbox/procstream.lua",
    ["moonbox.runtime"] = "lua/moonbox/runtime.lua",
    ["moonbox.sched"] = "lua/moonbox/sched.lua",
    ["moonbox.subprocess.collector"] = "lua/moonbox/subprocess/collector.lua",
    ["moonbox.subprocess.e2b"] = "lua/moonbox/subprocess/e2b.lua",
    ["moonbox.subprocess.handle"] = "lua/moonbox/subprocess/handle.lua",
    ["moonbox.subprocess.local"] = "lua/moonbox/subprocess/local.lua",
    ["moonbox.subprocess.spec"] = "lua/moonbox/subprocess/spec.lua",
    ["moonbox.subprocess.service"] = "lua/moonbox/subprocess/service.lua",
    ["moonbox.subprocess.terminal"] = "lua/moonbox/subprocess/terminal.lua",
    ["moonbox.sync"] = "lua/moonbox/sync.lua",
    ["moonbox.text"] = "lua/moonbox/text.lua",
    ["moonbox.fields"] = "lua/moonbox/fields.lua",
    ["moonbox.world.common"] = "lua/moonbox/world/common.lua",
    ["moonbox.world.local"] = "lua/moonbox/world/local.lua",
    ["moonbox.workspace"] = "lua/moonbox/workspace/init.lua",
    ["moonbox.workspace.manifest"] = "lua/moonbox/workspace/manifest.lua",
    ["moonbox.workspace.plan"] = "lua/moonbox/workspace/plan.lua",
    ["moonbox.policies.env"] = "policies/env.lua",
    ["moonbox.policies.lifecycle"] = "policies/lifecycle.lua",
    ["moonbox.policies.timeouts"] = "policies/timeouts.lua",
    ["moonbox.policies.composition"] = "policies/composition.lua",
    ["moonbox.policies.network"] = "policies/network.lua",
  },
}
