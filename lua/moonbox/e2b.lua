-- moonbox.e2b — the sandbox owner: one shared E2B sandbox per composition and its lifecycle.
--
-- Config: apiKey (else E2B_API_KEY), cwd (absolute, default /home/user/workspace), timeoutMs
-- (lease, default 300000), sandboxId (connect to an existing sandbox instead of creating one),
-- template. Endpoints come from E2B_API_URL / E2B_SANDBOX_URL / E2B_DOMAIN. With none of
-- apiKey, E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN set, the owner starts a local
-- sandboxd and stops it at teardown.
--
-- Creation starts when the plugin loads. Setup (4 requests: create, upload mbwrap as root, one
-- root process that makes it 0755 in a root-owned 0755 directory and verifies both, one user
-- process) makes cwd, a private runtime root (0700, made fresh, verified to be a real
-- directory) outside cwd for staging and spills, and captures the ambient environment once.
-- The sandbox user can neither replace nor change mbwrap. `owner:sandbox()` waits for setup
-- and hands out the handle; a setup failure deletes the sandbox once and reports the original
-- error. Teardown follows policies/lifecycle.lua; a failed delete is reported and retried by
-- the next dispose().
local errors = require "moonbox.errors"
local api_mod = require "moonbox.api"
local envd_mod = require "moonbox.envd"

local M = { name = "e2b", provides = "e2b", inject = {} }

local SHARED_SANDBOX_DOMAINS = { ["e2b.app"] = true, ["e2b.dev"] = true, ["e2b.pro"] = true, ["e2b-staging.dev"] = true }

local function lifecycle_default(field) return function() return require("policies.lifecycle")[field] end end

M.schema = {
  apiKey = { type = "string", secret = true,
    check = function(v) if v == "" then return "must be non-empty (or leave it unset to use E2B_API_KEY)" end end },
  cwd = { type = "string", default = lifecycle_default("default_cwd"),
    check = function(v)
      if v:sub(1, 1) ~= "/" then return "must be an absolute Linux path: " .. v end
      if v:find("\0", 1, true) then return "must not contain NUL" end
    end },
  timeoutMs = { type = "number", default = lifecycle_default("default_timeout_ms"),
    check = function(v)
      if v ~= v or v <= 0 or v == math.huge then return "must be a positive finite number" end
    end },
  sandboxId = { type = "string", check = function(v) if not v:match("^[%w]+$") then return "must be alphanumeric" end end },
  template = { type = "string" },
}

local function mb() return require "moonbox" end
local FOREVER_MS = 2147483647
-- Where mbwrap is installed: a root-owned 0755 directory ("%s": the owner's random id) whose
-- parent the sandbox user cannot write (policies/lifecycle.lua `wrapper_dir` overrides).
M.WRAPPER_DIR = "/opt/.moonbox-%s"

local function random_hex(n)
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(n) or tostring(os.time()) .. tostring(os.clock())
  if f then f:close() end
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end)):sub(1, 2 * n)
end
M.random_hex = random_hex

local function shell_quote(s) return "'" .. s:gsub("'", "'\"'\"'") .. "'" end

-- getenv(name), with an empty value counting as unset.
local function env_value(getenv, name)
  local v = getenv(name)
  if v == nil or v == "" then return nil end
  return v
end

-- Where the endpoints are; local = true when moonbox must start its own sandboxd.
-- `getenv` (default os.getenv) lets an embedder or a spec supply the environment.
function M.endpoints(config, getenv)
  getenv = getenv or os.getenv
  local function get(name) return env_value(getenv, name) end
  local e = {
    api_key = config.apiKey or get("E2B_API_KEY"),
    api_url = get("E2B_API_URL"),
    sandbox_url = get("E2B_SANDBOX_URL"),
    domain = get("E2B_DOMAIN"),
  }
  e.local_sandboxd = not (e.api_key or e.api_url or e.sandbox_url or e.domain)
  e.api_url = e.api_url or ("https://api." .. (e.domain or "e2b.app"))
  return e
end

-- envd base URL for a created sandbox (reference §1.2).
function M.sandbox_url(ep, id, domain)
  if ep.sandbox_url then return ep.sandbox_url end
  local d = domain or ep.domain or "e2b.app"
  if SHARED_SANDBOX_DOMAINS[d] then return "https://sandbox." .. d end
  return ("https://%d-%s.%s"):format(envd_mod.PORT, id, d)
end

-- The running program when it is the moonbox executable (not a Lua interpreter): its path.
local function moonbox_exe()
  local f = io.open("/proc/self/stat", "r")              -- opened by us: our own pid
  local pid = f and f:read("n")
  if f then f:close() end
  if not pid then return nil end
  local p = io.popen("readlink -- /proc/" .. math.tointeger(pid) .. "/exe 2>/dev/null")
  local exe = p and p:read("l")
  if p then p:close() end
  if exe and exe:match("/moonbox$") then return exe end
  return nil
end
M.moonbox_exe = moonbox_exe

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() return true end
  return false
end

-- A helper binary of this build: $<env_name>, else next to the running moonbox executable,
-- else $MB_BUILD_DIR/bin, else the build dir of the loaded C core (<build>/lib/moonbox/core.so),
-- else <source>/build/bin. `getenv` and `exe` (the moonbox executable, or false) are for specs.
local function find_binary(env_name, name, getenv, exe)
  getenv = getenv or os.getenv
  local v = env_value(getenv, env_name)
  if v then return v end
  local dirs = {}
  if exe == nil then exe = moonbox_exe() end
  if exe then dirs[#dirs + 1] = exe:match("^(.*)/[^/]*$") end
  local build = env_value(getenv, "MB_BUILD_DIR")
  if build then dirs[#dirs + 1] = build .. "/bin" end
  local so = package.searchpath and package.searchpath("moonbox.core", package.cpath)
  local sobuild = so and so:match("^(.*)/lib/moonbox/core%.so$")
  if sobuild then dirs[#dirs + 1] = sobuild .. "/bin" end
  -- next to the Lua tree: <root>/lua/moonbox/e2b.lua → <root>/build/bin/<name>
  local here = debug.getinfo(1, "S").source:match("^@(.*)/lua/moonbox/e2b%.lua$")
  if here then dirs[#dirs + 1] = here .. "/build/bin" end
  for _, d in ipairs(dirs) do
    local p = d .. "/" .. name
    if exists(p) then return p end
  end
  return nil
end
M.find_binary = find_binary

-- Local sandboxd: a host child process (mb.proc) listening on a free loopback port, which it
-- reports on stdout ("sandboxd listening on http://127.0.0.1:PORT"); its state directory is
-- private to this owner and removed at stop. --exit-with-parent: it destroys its sandboxes and
-- exits when moonbox dies without stopping it (SIGKILL, crash).
local function start_sandboxd(timeouts)
  local m = mb()
  local bin = M.find_binary("MOONBOX_SANDBOXD", "sandboxd")
  if not bin then
    return nil, errors.new("E2B_SANDBOXD", "no E2B endpoint configured and no local sandboxd found "
      .. "(set E2B_API_KEY for the cloud, or MOONBOX_SANDBOXD / MB_BUILD_DIR)")
  end
  local p = io.popen("mktemp -d /tmp/moonbox-sandboxd.XXXXXX")
  local state = p and p:read("l")
  if p then p:close() end
  if not state or state == "" then return nil, errors.new("E2B_SANDBOXD", "cannot make a state directory") end
  local key = "e2b_" .. random_hex(20)
  local proc, err = m.proc.spawn{ argv = { bin, "--listen", "127.0.0.1:0", "--api-key", key,
    "--state-dir", state .. "/state", "--exit-with-parent" } }
  if not proc then
    os.execute("rm -rf " .. shell_quote(state))
    return nil, err
  end
  local d = { proc = proc, pid = proc.pid, state = state, api_key = key, log = {} }
  local found = m.event()
  -- Drain both pipes for the daemon's whole life (a full pipe would block it).
  for _, which in ipairs({ "stdout", "stderr" }) do
    m.spawn(function()
      local buf = ""
      while true do
        local chunk = proc:read(which, FOREVER_MS)
        if not chunk then break end
        if #d.log < 64 then d.log[#d.log + 1] = chunk end
        if not found.is_set then
          buf = buf .. chunk
          local url = buf:match("sandboxd listening on (http://[%d%.]+:%d+)")
          if url then found:set(url) end
          if #buf > 65536 then buf = buf:sub(-4096) end
        end
      end
      if which == "stdout" then found:set(false) end
    end)
  end
  local url = found:wait(timeouts.sandboxd_start_ms)
  if not url then
    proc:kill("SIGKILL")
    proc:wait(timeouts.sandboxd_stop_grace_ms)
    proc:close()
    os.execute("rm -rf " .. shell_quote(state))
    return nil, errors.new("E2B_SANDBOXD", "local sandboxd did not start: " .. table.concat(d.log):sub(1, 2000))
  end
  d.url = url
  return d
end

local function stop_sandboxd(d, timeouts)
  if not d or not d.proc then return end
  d.proc:kill("SIGTERM")
  if not d.proc:wait(timeouts.sandboxd_stop_grace_ms) then
    d.proc:kill("SIGKILL")
    d.proc:wait(timeouts.sandboxd_stop_grace_ms)
  end
  d.proc:close()
  d.proc = nil
  os.execute("rm -rf " .. shell_quote(d.state))
end

------------------------------------------------------------------------------------------------
-- The sandbox handle shared by the providers.
local Sandbox = {}
Sandbox.__index = Sandbox

-- Run a program directly (no shell) and collect its raw stdout/stderr (for setup only).
-- opts: envs, cwd, timeout_ms, user (default: the sandbox user). → { stdout, stderr, exit_code } | nil, err
function Sandbox:exec_raw(argv, opts)
  opts = opts or {}
  local args = {}
  for i = 2, #argv do args[#args + 1] = argv[i] end
  local proc = { cmd = argv[1], args = #args > 0 and args or nil, envs = opts.envs, cwd = opts.cwd }
  local s, err = self.envd:stream("process.Process/Start", { process = proc, stdin = false }, { user = opts.user })
  if not s then return nil, err end
  local out, errb, code = {}, {}, nil
  while true do
    local m, serr = s:next(opts.timeout_ms)
    if not m then
      if serr then return nil, serr end
      break
    end
    local ev = m.event or {}
    if ev.data then
      if ev.data.stdout then out[#out + 1] = self.core.b64decode(ev.data.stdout) end
      if ev.data.stderr then errb[#errb + 1] = self.core.b64decode(ev.data.stderr) end
    elseif ev["end"] then
      code = math.tointeger(ev["end"].exitCode) or 0
    end
  end
  if code == nil then return nil, errors.new("E2B_PROTOCOL", argv[1] .. ": stream ended without an end event") end
  return { stdout = table.concat(out), stderr = table.concat(errb), exit_code = code }
end

-- Run one mbwrap tool: one Process/Start, frames decoded in C. → output bytes | nil, err
-- A failing tool reports "err CODE detail" and exit 1 → err.code = "TOOL_" .. CODE,
-- err.tool_code = CODE.
function Sandbox:tool(args, opts)
  opts = opts or {}
  local s, err = self.envd:stream("process.Process/Start", {
    process = { cmd = self.wrapper, args = args, cwd = opts.cwd }, stdin = false,
  })
  if not s then return nil, err end
  local dec = self.core.frame_decoder(64 * 1024)
  local out, exit_code, done = {}, nil, false
  while true do
    local m, serr = s:next(opts.timeout_ms or self.timeouts.tool_ms)
    if not m then
      if serr then return nil, serr end
      break
    end
    local ev = m.event or {}
    if ev.data and ev.data.stdout then
      local frames, ferr = dec:push(self.core.b64decode(ev.data.stdout))
      if not frames then s:close() return nil, ferr end
      for _, f in ipairs(frames) do
        if f.kind == "stdout" then out[#out + 1] = f.data
        elseif f.kind == "exit" then exit_code = f.value
        elseif f.kind == "done" then done = true end
      end
    end
  end
  local ok, ferr = dec:finish()
  if not ok then return nil, ferr end
  local text = table.concat(out)
  if not done or exit_code == nil then
    return nil, errors.new("E2B_PROTOCOL", "mbwrap " .. tostring(args[1]) .. ": incomplete tool output")
  end
  if exit_code ~= 0 then
    local code, detail = text:match("^err (%S+) ?(.-)\n?$")
    return nil, errors.new("TOOL_" .. (code or "FAILED"), ("mbwrap %s: %s"):format(args[1], detail or text),
      { tool_code = code, exit_code = exit_code })
  end
  return text
end

------------------------------------------------------------------------------------------------
local Owner = {}
Owner.__index = Owner

-- Root setup script: mbwrap (uploaded as root: root's, 0644) becomes 0755 in its root-owned
-- directory; then both and the directory's parent are verified (a real root-owned 0755
-- directory and regular file; a parent the sandbox user cannot rename entries in).
local INSTALL = [[
set -e
dir=$1 wrap=$2
chmod 755 -- "$dir" "$wrap"
[ -d "$dir" ] && [ ! -L "$dir" ] && [ "$(stat -c '%u %a' -- "$dir")" = "0 755" ] ||
  { echo "wrapper directory must be a root-owned 0755 directory: $dir" >&2; exit 3; }
[ -f "$wrap" ] && [ ! -L "$wrap" ] && [ "$(stat -c '%u %a %h' -- "$wrap")" = "0 755 1" ] ||
  { echo "mbwrap must be a root-owned 0755 regular file: $wrap" >&2; exit 3; }
parent=$(dirname -- "$dir")
set -- $(stat -c '%u %a' -- "$parent")
[ "$1" = 0 ] && { [ $(( 0$2 & 022 )) = 0 ] || [ $(( 0$2 & 01000 )) != 0 ]; } ||
  { echo "wrapper directory's parent is not protected: $parent" >&2; exit 3; }
]]

-- Setup script (the sandbox user): make the runtime root fresh (mkdir fails on anything already
-- there, a symlink included), verify it, make cwd, report the login home and the ambient
-- environment (NUL-separated, exact bytes).
local PREPARE = [[
set -e
root=$1 cwd=$2
mkdir -m 700 -- "$root" || { echo "cannot make the runtime root: $root" >&2; exit 3; }
[ -d "$root" ] && [ ! -L "$root" ] || { echo "runtime root must be a real directory: $root" >&2; exit 3; }
mkdir -p -- "$cwd"
[ -d "$cwd" ] || { echo "cwd is not a directory: $cwd" >&2; exit 4; }
home=$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6) || home=
[ -n "$home" ] || home=$HOME
printf '%s\0' "$home"
env -0
]]
M.PREPARE = PREPARE         -- exported for specs: args are (runtime root, cwd)

local function parse_prepare(out)
  local home, rest = out:match("^([^%z]*)%z(.*)$")
  if not home or home:sub(1, 1) ~= "/" then return nil end
  local env = {}
  for entry in rest:gmatch("([^%z]*)%z") do
    local k, v = entry:match("^([^=]+)=(.*)$")
    if k then env[k] = v end
  end
  -- the preparing shell's own bookkeeping is not part of the ambient environment
  env._, env.PWD, env.OLDPWD, env.SHLVL = nil, nil, nil, nil
  env.HOME = home
  return home, env
end
M.parse_prepare = parse_prepare

function Owner:_setup()
  local m = mb()
  local ep = self.endpoints
  if ep.local_sandboxd then
    local d, err = start_sandboxd(self.timeouts)
    if not d then return nil, err end
    self.sandboxd = d
    ep.api_key, ep.api_url, ep.sandbox_url = d.api_key, d.url, d.url
  end
  if not ep.api_key then
    return nil, errors.new("E2B_CONFIG", "configure apiKey or set E2B_API_KEY")
  end
  self.api = api_mod.new{ url = ep.api_url, api_key = ep.api_key, http = m.http,
    timeout_ms = self.timeouts.request_ms, create_timeout_ms = self.timeouts.create_ms }
  local info, err
  if self.config.sandboxId then
    info, err = self.api:connect(self.config.sandboxId, self.config.timeoutMs)
  else
    info, err = self.api:create{ template = self.config.template, timeout_ms = self.config.timeoutMs }
  end
  if not info then return nil, err end
  self.info, self.id = info, info.id
  self.lease_granted_at = m.now()
  local ok, serr = self:_prepare(info)
  if not ok then
    if not self.config.sandboxId then                  -- never delete a sandbox we did not create
      for _ = 1, self.lifecycle.setup_rollback_deletes do
        if self.api:delete(info.id) ~= nil then break end
      end
      self.deleted = true
    end
    return nil, serr
  end
  return true
end

function Owner:_prepare(info)
  local m = mb()
  local ep = self.endpoints
  local core = require "moonbox.core"
  local sb = setmetatable({
    id = info.id, info = info, api = self.api, core = core, timeouts = self.timeouts,
    cwd = self.config.cwd, policies = self.policies,
  }, Sandbox)
  sb.envd = envd_mod.new{ url = M.sandbox_url(ep, info.id, info.domain), sandbox_id = info.id,
    access_token = info.access_token, http = m.http, core = core,
    timeout_ms = self.timeouts.request_ms, stream_open_ms = self.timeouts.stream_open_ms,
    stream_idle_ms = self.timeouts.stream_idle_ms, keepalive_s = self.timeouts.keepalive_interval_s }
  local hex = M.random_hex(8)
  sb.root = self.lifecycle.runtime_root:format(hex)
  sb.wrapper_dir = (self.lifecycle.wrapper_dir or M.WRAPPER_DIR):format(hex)
  sb.wrapper = sb.wrapper_dir .. "/mbwrap"
  local wrapper_file = M.find_binary("MOONBOX_MBWRAP", "mbwrap")
  if not wrapper_file then return nil, errors.new("E2B_SETUP", "mbwrap binary not found (MOONBOX_MBWRAP / MB_BUILD_DIR)") end
  local up, uerr = sb.envd:upload(sb.wrapper, nil, { file = wrapper_file, user = "root" })
  if not up then return nil, uerr end
  local ir, ierr = sb:exec_raw({ "/bin/sh", "-c", INSTALL, "moonbox-install", sb.wrapper_dir, sb.wrapper }, { user = "root" })
  if not ir then return nil, ierr end
  if ir.exit_code ~= 0 then
    return nil, errors.new("E2B_SETUP", ("installing mbwrap failed (exit %d): %s"):format(ir.exit_code, ir.stderr))
  end
  local r, rerr = sb:exec_raw({ "/bin/sh", "-c", PREPARE, "moonbox-prepare", sb.root, sb.cwd })
  if not r then return nil, rerr end
  if r.exit_code ~= 0 then
    return nil, errors.new("E2B_SETUP", ("sandbox setup failed (exit %d): %s"):format(r.exit_code, r.stderr))
  end
  local home, ambient = parse_prepare(r.stdout)
  if not home then return nil, errors.new("E2B_SETUP", "sandbox setup returned an invalid environment") end
  sb.home, sb.ambient = home, ambient
  self.handle = sb
  return true
end

function Owner:_renew_loop()
  local m = mb()
  while not self.disposing do
    local delay = self.lifecycle.renewal_delay(self.config.timeoutMs)
    if not delay then return end
    local _, err = m.sleep(delay)
    if err or self.disposing then return end
    local ok, rerr = self.api:set_timeout(self.id, self.config.timeoutMs)
    if ok then self.lease_granted_at = m.now()
    elseif rerr.code == "E2B_NOT_FOUND" then self.gone = true return
    else self.renew_error = rerr end
  end
end

-- The ready sandbox handle. → sb | nil, err (E2B_DISPOSING once teardown began, or the setup error)
function Owner:sandbox(timeout_ms)
  if self.disposing then return nil, errors.new("E2B_DISPOSING", "E2B sandbox service is disposing") end
  local ok, err = self.ready:wait(timeout_ms or self.timeouts.create_ms + self.timeouts.request_ms * 3)
  if self.disposing then return nil, errors.new("E2B_DISPOSING", "E2B sandbox service is disposing") end
  if ok == nil then return nil, err end
  if self.setup_error then return nil, self.setup_error end
  return self.handle
end

function Owner:dispose()
  if self.disposed then return true end
  local steps, result_err = {}, nil
  for _, s in ipairs(self.lifecycle.teardown) do steps[#steps + 1] = s end
  for _, step in ipairs(steps) do
    if step == "block" then
      self.disposing = true
    elseif step == "await_setup" then
      self.ready:wait(self.timeouts.create_ms + self.timeouts.request_ms * 3)
    elseif step == "stop_renewal" then
      if self.renewer then self.renewer:cancel() end
    elseif step == "delete" then
      if self.id and not self.deleted and not self.config.sandboxId then
        local ok, err = self.api:delete(self.id)       -- true | false (not found) | nil, err
        if ok == false then
          if self.lifecycle.delete_not_found_is_gone then ok = true
          else err = errors.new("E2B_NOT_FOUND", ("sandbox %s was not found at deletion"):format(self.id)) end
        end
        if ok then self.deleted = true else result_err = err end
      end
    elseif step == "stop_sandboxd" then
      if self.sandboxd and self.sandboxd.proc then
        stop_sandboxd(self.sandboxd, self.timeouts)
        self.deleted = true                             -- its sandboxes went with it
      end
    end
  end
  -- A failed delete is reported, and the next dispose() tries again.
  if result_err then return nil, result_err end
  self.disposed = true
  return true
end

function M.new(ctx, config)
  local m = mb()
  local policies = ctx.policies or {}
  local self = setmetatable({
    config = config, policies = policies,
    lifecycle = policies.lifecycle or require("policies.lifecycle"),
    timeouts = policies.timeouts or require("policies.timeouts"),
  }, Owner)
  self.endpoints = M.endpoints(config, ctx.getenv)
  self.ready = m.event()
  -- Creation starts now; the providers wait on `ready` through owner:sandbox().
  m.spawn(function()
    local pok, ok, err = pcall(self._setup, self)
    if not pok then ok, err = nil, errors.new("E2B_SETUP", "setup raised: " .. tostring(ok)) end
    if not ok then
      self.setup_error = err or errors.new("E2B_SETUP", "setup failed")
      -- nothing is left to serve: do not keep a local sandboxd until disposal
      if self.sandboxd then stop_sandboxd(self.sandboxd, self.timeouts) end
    end
    if ok and self.lifecycle.renewal_delay(config.timeoutMs) then
      self.renewer = m.spawn(function() self:_renew_loop() end)
    end
    self.ready:set(true)
  end)
  return self
end

M.Sandbox = Sandbox
M.Owner = Owner
return M
