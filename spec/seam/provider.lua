-- Provider-agnostic harness for the seam contract specs: one matrix, the same spec files for
-- every provider family. A family is selected with MOONBOX_SEAM_PROVIDER ("e2b", the default:
-- the E2B providers on sandboxd; "local": the host providers); it yields a composed ctx with
-- ctx.fs and ctx.subprocess plus a few facts the specs need (a scratch directory, how to run
-- shell snippets).
local compose = require "moonbox.compose"
local function mb() return require "moonbox" end

local P = {}

-- Host directories the specs make (the workspace plugin's records among them), removed at close.
local host_tmp
local function ensure_host_tmp()
  host_tmp = host_tmp or assert(io.popen("mktemp -d /tmp/moonbox-seam-host.XXXXXX")):read("l")
  return host_tmp
end

-- The consumers and workspace sync, identical in every family (spec/consumers, spec/sync): only
-- the provider lines differ.
local function consumers(cwd)
  ensure_host_tmp()
  return ('plugin "bash" { cwd = %q, graceMs = 1000 }\nplugin "terminal" { cwd = %q, graceMs = 1000 }\n'
    .. 'plugin "lsp" { root = %q, args = { "--log=error" } }\n'
    .. 'plugin "workspace" { stateDir = %q, progressMs = 5 }\n'):format(cwd, cwd, cwd, host_tmp .. "/sync-state")
end

local families = {
  e2b = {
    composition = function()
      return 'plugin "e2b" { cwd = "/home/user/workspace" }\nplugin "fs" {}\nplugin "subprocess" {}\n'
        .. consumers("/home/user/workspace")
    end,
  },
  ["local"] = {
    -- a private working directory on the host, removed at close
    composition = function(s)
      s.cwd = assert(io.popen("mktemp -d /tmp/moonbox-seam-local.XXXXXX")):read("l")
      return ('plugin "fs-local" { cwd = %q }\nplugin "subprocess-local" {}\n'):format(s.cwd) .. consumers(s.cwd)
    end,
  },
}

local state

-- Run fn inside the loop with a deadline so a hung operation fails the spec instead of the run.
function P.run(fn, timeout_ms)
  return mb().run(function()
    local t = mb().spawn(fn)
    local res = table.pack(t:join(timeout_ms or 60000))
    if not res[1] then error(res[2], 0) end
    return table.unpack(res, 2, res.n)
  end)
end

-- P.run with a task collecting garbage all along: objects only C holds across a yield must
-- survive it.
function P.run_gc(fn, timeout_ms)
  return P.run(function()
    local m = mb()
    local gc = m.spawn(function() while true do collectgarbage() m.sleep(1) end end)
    local r = table.pack(pcall(fn))
    gc:cancel()
    if not r[1] then error(r[2], 0) end
    return table.unpack(r, 2, r.n)
  end, timeout_ms)
end

function P.open()
  if state then return state end
  local name = os.getenv("MOONBOX_SEAM_PROVIDER") or "e2b"
  local fam = assert(families[name], "unknown seam provider " .. name)
  local s = { name = name }
  local comp = assert(compose.load("seam-" .. name .. ".lua", { source = fam.composition(s) }))
  state = P.run(function()
    local ctx, loaded = assert(compose.start(comp))
    s.ctx, s.loaded = ctx, loaded
    if name == "e2b" then
      local sb = assert(ctx.e2b:sandbox())
      s.cwd, s.sandbox, s.api_key = sb.cwd, sb, ctx.e2b.endpoints.api_key
    end
    return s
  end, 120000)
  return state
end

function P.close()
  if not state then return end
  local s = state
  state = nil
  P.run(function() assert(compose.stop(s.ctx, s.loaded)) end)
  if s.name == "local" and s.cwd:match("^/tmp/moonbox%-seam%-local%.") then os.execute("rm -rf '" .. s.cwd .. "'") end
  if host_tmp then os.execute("rm -rf '" .. host_tmp .. "'") host_tmp = nil end
end

-- A fresh directory on the host (both families: the host side of workspace sync).
local hn = 0
function P.host_dir(prefix)
  ensure_host_tmp()
  hn = hn + 1
  local d = ("%s/%s-%d"):format(host_tmp, prefix or "h", hn)
  assert(os.execute("mkdir -p '" .. d .. "'"))
  return d
end

-- A fresh scratch directory path (not created) under the provider's cwd.
local n = 0
function P.scratch(prefix)
  n = n + 1
  return ("%s/%s-%d-%d"):format(state.cwd, prefix or "t", os.time(), n)
end

-- Run a shell snippet in the execution world through the subprocess seam (inside P.run).
-- → stdout, exit code, stderr
function P.sh(script, opts)
  opts = opts or {}
  local h = assert(state.ctx.subprocess:spawn{ argv = { "/bin/sh", "-c", script }, cwd = opts.cwd or state.cwd,
    graceMs = 1000, env = opts.env,
    stdio = { stdin = opts.stdin and { data = opts.stdin } or "ignore", stdout = { maxBytes = 1 << 20 },
      stderr = { maxBytes = 1 << 16 } } })
  local o = assert(h:wait(opts.timeout_ms or 30000))
  return h.collected.stdout:readFrom(0).text, o.exitCode, h.collected.stderr:readFrom(0).text, o
end

-- Live processes of the execution world other than the probe itself, as "pid args" lines.
function P.survivors(pattern)
  local out = P.sh("for p in /proc/[0-9]*; do s=$(cut -d' ' -f3 $p/stat 2>/dev/null); "
    .. "[ \"$s\" = Z ] && continue; a=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
    .. "case \"$a\" in *" .. pattern .. "*) echo \"${p#/proc/} $a\";; esac; done")
  local lines = {}
  for l in out:gmatch("[^\n]+") do if not l:find("/proc/", 1, true) then lines[#lines + 1] = l end end
  return lines
end

-- A copy of a program under a unique name (inside P.run), so that its processes can be found by
-- name: `exec -a` is not portable (dash has none), and a failing one made the checks vacuous.
function P.named(program, marker)
  local dir = P.scratch("bin")
  local _, code, err = P.sh("mkdir -p '" .. dir .. "' && cp \"$(command -v " .. program .. ")\" '" .. dir .. "/" .. marker .. "'")
  assert(code == 0, err)
  return dir .. "/" .. marker
end

-- Requests counted at the transport while fn runs.
function P.requests(fn)
  local before = mb().http.stats().requests
  local r = table.pack(fn())
  return mb().http.stats().requests - before, table.unpack(r, 1, r.n)
end

return P
