-- moonbox.e2b.owner — the sandbox owner: one shared E2B sandbox per composition and its
-- lifecycle (create or connect, setup, lease renewal, teardown by policy).
--
-- Setup (4 requests: create, upload mbwrap as root, one root process that makes it 0755 in a
-- root-owned 0755 directory and verifies both, one user process) makes cwd, a private runtime
-- root (0700, made fresh, verified to be a real directory) outside cwd for staging and spills,
-- and captures the ambient environment once. The sandbox user can neither replace nor change
-- mbwrap. `owner:sandbox()` waits for setup and hands out the handle; a setup failure deletes
-- the sandbox once and reports the original error. Teardown follows policies/lifecycle.lua; a
-- failed delete is reported and retried by the next dispose().
local errors = require "moonbox.errors"
local ids = require "moonbox.ids"
local api_mod = require "moonbox.e2b.api"
local envd_mod = require "moonbox.e2b.envd"
local endpoints = require "moonbox.e2b.endpoints"
local launcher = require "moonbox.e2b.launcher"
local sandbox = require "moonbox.world.e2b"
local R = require "moonbox.policy.rules"
local http = require "moonbox.http"
local pstream = require "moonbox.pstream"
local sched = require "moonbox.sched"
local events = require "moonbox.events"
local core = require "moonbox.core"
local client_mod = require "moonbox.e2b.client"
local policy_set = require "moonbox.policies"
local binaries = require "moonbox.binaries"

local M = {}

-- The create request's network options: the composition's network policy, with the plugin's
-- allowInternetAccess when it sets one (compose refuses the two disagreeing, e2b.validate), its
-- rules in E2B's shape (env_secret(var) → the name of the secret made for a fromEnv variable)
-- and the plugin's allowPublicTraffic. → allow_internet_access, network ({ allowOut, denyOut,
-- rules, allowPublicTraffic } | nil: nothing, the request older servers know)
function M.network_request(config, policies, env_secret)
  local p = (policies and policies.network) or policy_set.default("network")
  local internet = config.allowInternetAccess
  if internet == nil then internet = p.internet end
  local rules = next(p.rules) and R.wire(p.rules, env_secret or function(v)
    error("owner.network_request: no secret for fromEnv " .. tostring(v), 3)
  end) or nil
  return internet, api_mod.network_body{ allowOut = p.allow_out, denyOut = p.deny_out, rules = rules,
    allowPublicTraffic = config.allowPublicTraffic }
end

-- A secret made for one sandbox from a host variable: a random name, the value, and the metadata
-- that makes sandboxd let only that sandbox's rules use it and delete it when the sandbox ends.
M.SCOPE_KEY = "sandboxd.sandbox"
function M.env_secret_name() return "mbenv-" .. ids.hex(8) end

-- "network policy rules["x"].headers.Authorization (net.lua:3)" (what: instead of "network policy")
local function rule_text(p, h, what)
  local where = p.rule_where and p.rule_where(h.host)
  return ("%s rules[%q].headers%s%s"):format(what or "network policy", h.host, R.path_part(h.header),
    where and (" (" .. where .. ")") or "")
end

-- The host variables the rules of p (a network policy, or { rules }) name, read now (at sandbox
-- start). getenv: the embedder's or os.getenv; what: who asks. → { VAR → value } | nil, err
-- (E2B_CONFIG naming the variable and the rule; an empty value counts as unset; a value a header
-- cannot carry is refused without quoting it)
function M.read_env(p, getenv, what)
  local out = {}
  for _, h in ipairs(R.headers(p.rules)) do
    if h.fromEnv and out[h.fromEnv] == nil then
      local v = getenv(h.fromEnv)
      if v == nil or v == "" then
        return nil, errors.new("E2B_CONFIG", ("%s: fromEnv %s is not set on this host (or empty): set it, or remove the rule")
          :format(rule_text(p, h, what), h.fromEnv), { variable = h.fromEnv })
      end
      local why = client_mod.secret_value_error(v)
      if why then
        return nil, errors.new("E2B_CONFIG", ("%s: fromEnv %s: %s"):format(rule_text(p, h, what), h.fromEnv,
          (why:gsub("^the value", "its value"))), { variable = h.fromEnv })
      end
      out[h.fromEnv] = v
    end
  end
  return out
end

-- Where mbwrap is installed: a root-owned 0755 directory ("%s": the owner's random id) whose
-- parent the sandbox user cannot write (policies/lifecycle.lua `wrapper_dir` overrides).
M.WRAPPER_DIR = "/opt/.moonbox-%s"

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
  local ep = self.endpoints
  if ep.local_sandboxd then
    local d, err = launcher.start(self.timeouts)
    if not d then return nil, err end
    self.sandboxd = d
    ep.api_key, ep.api_url, ep.sandbox_url = d.api_key, d.url, d.url
  end
  if not ep.api_key then
    return nil, errors.new("E2B_CONFIG", "configure apiKey or set E2B_API_KEY")
  end
  self.api = api_mod.new{ url = ep.api_url, api_key = ep.api_key, http = http, transport = ep.transport,
    timeout_ms = self.timeouts.request_ms, create_timeout_ms = self.timeouts.create_ms }
  local info, err
  if self.config.sandboxId then
    info, err = self.api:connect(self.config.sandboxId, self.config.timeoutMs)
    if not info and err.code == "E2B_NOT_FOUND" and self.sandboxd then
      -- a sandbox of `moonbox sandbox create` lives in the background sandboxd, not in this run's
      err.message = err.message .. " (this run's embedded sandboxd starts with no sandboxes: for one made by "
        .. "`moonbox sandbox create` without E2B variables, use `moonbox run --background-sandboxd`)"
    end
  else
    local c = self.config
    local ok, cerr = self:_check_secrets()
    if not ok then return nil, cerr end
    local names = {}                                   -- VAR → the secret made for it, after the create
    for var in pairs(self.env_values or {}) do names[var] = M.env_secret_name() end
    local internet, network = M.network_request(c, self.policies, function(var) return names[var] end)
    info, err = self.api:create{ template = c.template, timeout_ms = c.timeoutMs, metadata = c.metadata,
      env_vars = c.envVars, allow_internet_access = internet, auto_pause = c.autoPause, secure = c.secure,
      network = network }
    if info then
      self.created, self.id = info, info.id
      ok, err = self:_make_env_secrets(names, self.env_values)
      self.env_values = nil                            -- the values are the store's now
      if not ok then
        self:_rollback(info.id)
        return nil, err
      end
    end
  end
  if not info then return nil, err end
  self.created, self.id = info, info.id      -- the create/connect answer
  self.lease_granted_at = sched.now()
  local ok, serr = self:_prepare(info)
  if not ok then
    if not self.config.sandboxId then self:_rollback(info.id) end   -- never delete a sandbox we did not create
    return nil, serr
  end
  return true
end

-- A sandbox whose setup failed: deleted (a few tries), then the secrets made for it.
function Owner:_rollback(id)
  for _ = 1, self.lifecycle.setup_rollback_deletes do
    if self.api:delete(id) ~= nil then break end
  end
  self.deleted = true
  self:_delete_env_secrets()
end

-- Every `secret = NAME` the rules name must be in the store before the sandbox is made (E2B
-- would only fail the requests that use it, later). → true | nil, err
function Owner:_check_secrets()
  local p = self.policies.network
  if not p then return true end
  local seen = {}
  for _, h in ipairs(R.headers(p.rules)) do
    if h.secret and not seen[h.secret] then
      seen[h.secret] = true
      local s, err = self.api:secret_get(h.secret)
      if not s then
        if err.code == "E2B_NOT_FOUND" then
          return nil, errors.new("E2B_NOT_FOUND", ("%s: secret %s is not in the secret store of %s (moonbox secret set %s)")
            :format(rule_text(p, h), h.secret, self.api.url, h.secret), { secret = h.secret })
        end
        err.message = ("%s: secret %s: %s"):format(rule_text(p, h), h.secret, err.message)
        return nil, err
      end
    end
  end
  return true
end

-- The secrets for the rules' host variables, scoped to sandbox self.id. names: VAR → secret
-- name; values: VAR → value. Remembered in self.env_secrets (deleted at disposal; sandboxd
-- also deletes them when the sandbox ends). → true | nil, err (never quoting a value)
function Owner:_make_env_secrets(names, values)
  self.env_secrets = self.env_secrets or {}
  local vars = {}
  for var in pairs(names) do vars[#vars + 1] = var end
  table.sort(vars)
  for _, var in ipairs(vars) do
    local s, err = self.api:secret_create(names[var], values[var], { [M.SCOPE_KEY] = self.id })
    if not s then
      err.message = ("the secret for host variable %s (sandbox %s): %s"):format(var, self.id, err.message)
      return nil, err
    end
    self.env_secrets[#self.env_secrets + 1] = names[var]
  end
  return true
end

-- Deletes the secrets made for host variables (all, or those `keep` does not hold).
-- → true | nil, err (the first failure; the others are still tried)
function Owner:_delete_env_secrets(keep)
  local left, first = {}, nil
  for _, name in ipairs(self.env_secrets or {}) do
    if keep and keep[name] then left[#left + 1] = name
    else
      local ok, err = self.api:secret_delete(name)
      if ok == nil then left[#left + 1] = name; first = first or err end
    end
  end
  self.env_secrets = left
  if first then return nil, first end
  return true
end

function Owner:_prepare(info)
  local ep = self.endpoints
  local sb = sandbox.new{
    id = info.id, info = info, api = self.api, core = core, timeouts = self.timeouts,
    cwd = self.config.cwd, policies = self.policies,
  }
  sb.envd = envd_mod.new{ url = endpoints.sandbox_url(ep, info.id, info.domain), sandbox_id = info.id,
    access_token = info.access_token, http = http, pstream = pstream, core = core, transport = ep.transport,
    codec = ep.codec,
    timeout_ms = self.timeouts.request_ms, stream_open_ms = self.timeouts.stream_open_ms,
    stream_idle_ms = self.timeouts.stream_idle_ms, keepalive_s = self.timeouts.keepalive_interval_s }
  local hex = ids.hex(8)
  sb.root = self.lifecycle.runtime_root:format(hex)
  sb.wrapper_dir = (self.lifecycle.wrapper_dir or M.WRAPPER_DIR):format(hex)
  sb.wrapper = sb.wrapper_dir .. "/mbwrap"
  local wrapper_file = binaries.find("MOONBOX_MBWRAP", "mbwrap")
  if not wrapper_file then return nil, errors.new("E2B_SETUP", "mbwrap binary not found (MOONBOX_MBWRAP / MB_BUILD_DIR)") end
  local up, uerr = sb.envd:upload(sb.wrapper, nil, { file = wrapper_file, user = "root" })
  if not up then return nil, uerr end
  local ir, ierr = sb:exec({ "/bin/sh", "-c", INSTALL, "moonbox-install", sb.wrapper_dir, sb.wrapper }, { user = "root" })
  if not ir then return nil, ierr end
  if ir.exit_code ~= 0 then
    return nil, errors.new("E2B_SETUP", ("installing mbwrap failed (exit %d): %s"):format(ir.exit_code, ir.stderr))
  end
  local r, rerr = sb:exec({ "/bin/sh", "-c", PREPARE, "moonbox-prepare", sb.root, sb.cwd })
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
  while not self.disposing do
    local delay = self.lifecycle.renewal_delay(self.config.timeoutMs)
    if not delay then return end
    local _, err = sched.sleep(delay)
    if err or self.disposing then return end
    if not self.paused then                      -- a paused sandbox has no lease to renew
      local ok, rerr = self.api:set_timeout(self.id, self.config.timeoutMs)
      if ok then self.lease_granted_at = sched.now()
      elseif rerr.code == "E2B_NOT_FOUND" then self.gone = true return
      else self.renew_error = rerr end
    end
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

------------------------------------------------------------------------ the sandbox API
-- ctx.e2b:info() / setTimeout / pause / resume / metrics / snapshot / host on the owned
-- sandbox, and list / kill / connect / snapshots / deleteSnapshot on any: one control-plane
-- request each (moonbox.e2b.client), once setup is done.
function Owner:client()
  local _, err = self:sandbox()
  if err and not self.api then return nil, err end
  if not self.api then return nil, self.setup_error or errors.new("E2B_SETUP", "no control plane") end
  self.cl = self.cl or client_mod.new{ api = self.api, endpoints = self.endpoints }
  return self.cl
end

-- The calls on any sandbox work without one of our own; the others need the sandbox setup made
-- (a failed create is their error, not a raise about a missing id).
local ANY = { list = true, listAll = true, kill = true, connect = true, snapshots = true, deleteSnapshot = true }
local function no_sandbox(self, err)
  return err or self.setup_error or errors.new("E2B_SETUP", "no sandbox was created")
end

local function own(name, fn)
  Owner[name] = function(self, ...)
    local c, err = self:client()
    if not c then return nil, err end
    if not self.id and not ANY[name] then
      local _, serr = self:sandbox()
      return nil, no_sandbox(self, serr)
    end
    return fn(self, c, ...)
  end
end

own("info", function(self, c) return c:info(self.id) end)
own("metrics", function(self, c, o) return c:metrics(self.id, o) end)
own("snapshot", function(self, c, o) return c:snapshot(self.id, o) end)
-- → url, headers (e2b-traffic-access-token when the sandbox wants one: allowPublicTraffic false)
own("host", function(self, c, port)
  return c:host(self.id, port, self.created and self.created.domain, self.created and self.created.traffic_token)
end)
-- The lease: the renewal keeps the new value from now on.
own("setTimeout", function(self, c, ms)
  local ok, err = c:setTimeout(self.id, ms)
  if not ok then return nil, err end
  self.config.timeoutMs, self.lease_granted_at = ms, sched.now()
  return true
end)
-- Paused, the sandbox's lease is not renewed (E2B keeps a paused sandbox until it is resumed
-- or deleted); its processes are frozen, envd answers nothing until resume().
own("pause", function(self, c)
  local ok, err = c:pause(self.id)
  if ok == nil then return nil, err end
  self.paused = true
  return ok
end)
own("resume", function(self, c, o)
  o = o or {}
  local info, err = c:connect(self.id, { timeoutMs = o.timeoutMs or self.config.timeoutMs })
  if not info then return nil, err end
  self.paused = false
  self.lease_granted_at = sched.now()
  -- a resumed sandbox may come back with a new envd token
  if info.envdAccessToken and self.handle then self.handle.envd.access_token = info.envdAccessToken end
  info.envdAccessToken = nil
  return info
end)
-- The sandbox's egress rules, replaced as a whole (an omitted field is cleared); checked here
-- first (a wrong option raises at the caller; a bad entry is E2B_INVALID_ARGUMENT before any
-- request). ctx.e2b:updateNetwork(ctx.policies.network.options()) applies the composition's
-- (reloaded) policy.
-- Rules take the network policy's shape; a `fromEnv` header reads the host variable now and
-- sends it as a new secret for this sandbox only, and the secrets the previous rules used are
-- deleted once the new rules are in force (all of them at disposal; sandboxd deletes them too
-- when the sandbox ends).
function Owner:updateNetwork(o)
  local bad = client_mod.check_network(o, "updateNetwork", client_mod.NETWORK_KEYS, 2,
    { env = true })
  if bad then return nil, bad end
  local c, err = self:client()
  if not c then return nil, err end
  if not self.id then return nil, no_sandbox(self) end
  local values, verr = M.read_env({ rules = o.rules or {} }, self.getenv, "updateNetwork:")
  if not values then return nil, verr end
  local names, fresh = {}, {}
  for var in pairs(values) do names[var] = M.env_secret_name(); fresh[names[var]] = true end
  local before = {}
  for _, n in ipairs(self.env_secrets or {}) do before[n] = true end
  local ok, merr = self:_make_env_secrets(names, values)
  if not ok then
    self:_delete_env_secrets(before)
    return nil, merr
  end
  local put, perr = c.api:update_network(self.id, { allowOut = o.allowOut, denyOut = o.denyOut,
    rules = client_mod.wire_rules(o.rules, function(var) return names[var] end), allow_internet_access = o.allowInternetAccess })
  -- (a secret that cannot be deleted now stays listed: disposal tries again)
  self:_delete_env_secrets(put and fresh or before)
  if not put then
    if perr.code == "E2B_NOT_FOUND" and not perr.message:find(self.id, 1, true) then
      perr.message = ("sandbox %s not found: %s"):format(self.id, perr.message)
    end
    return nil, perr
  end
  return true
end
own("list", function(_, c, q) return c:list(q) end)
own("listAll", function(_, c, q) return c:listAll(q) end)
own("kill", function(_, c, id) return c:kill(id) end)
own("connect", function(_, c, id, o) return c:connect(id, o) end)
own("snapshots", function(_, c, q) return c:snapshots(q) end)
own("deleteSnapshot", function(_, c, id) return c:deleteSnapshot(id) end)

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
    elseif step == "cleanup" then
      -- a sandbox we only connected to outlives us: leave nothing of ours in it
      local sb = self.handle
      if sb and self.config.sandboxId and not self.gone and not self.cleaned then
        local r, err = sb:exec({ "/bin/rm", "-rf", "--", sb.root, sb.wrapper_dir }, { user = "root" })
        if r and r.exit_code == 0 then self.cleaned = true
        elseif not (err and err.code == "E2B_SANDBOX_GONE") then
          result_err = err or errors.new("E2B_TEARDOWN", ("cannot remove %s and %s: %s"):format(sb.root,
            sb.wrapper_dir, r.stderr))
        end
      end
    elseif step == "delete" then
      if self.id and not self.deleted and not self.config.sandboxId then
        local ok, err = self.api:delete(self.id)       -- true | false (not found) | nil, err
        if ok == false then
          if self.lifecycle.delete_not_found_is_gone then ok = true
          else err = errors.new("E2B_NOT_FOUND", ("sandbox %s was not found at deletion"):format(self.id)) end
        end
        if ok then self.deleted = true else result_err = err end
      end
      -- the secrets made from host variables go with the sandbox (or with our use of it)
      if self.env_secrets and #self.env_secrets > 0 then
        local ok, err = self:_delete_env_secrets()
        if not ok then result_err = result_err or err end
      end
    elseif step == "stop_sandboxd" then
      if self.sandboxd and self.sandboxd.proc then
        launcher.stop(self.sandboxd, self.timeouts)
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
  local policies = ctx.policies or {}
  local self = setmetatable({
    config = config, policies = policies,
    lifecycle = policies.lifecycle or policy_set.default("lifecycle"),
    timeouts = policies.timeouts or policy_set.default("timeouts"),
  }, Owner)
  self.endpoints = endpoints.resolve(config, ctx.getenv)
  -- nothing configured, and the caller chose the background sandboxd over an embedded one
  if self.endpoints.local_sandboxd and ctx.e2b_endpoints then endpoints.use(self.endpoints, ctx.e2b_endpoints) end
  self.getenv = ctx.getenv or os.getenv
  -- The rules' host variables are read now, before anything starts: an unset one is the
  -- composition's error, and no sandboxd or sandbox is made for it. A sandbox we only connect
  -- to keeps its own rules (e2b.validate warns), so nothing is read for it.
  local p = policies.network
  if p and not config.sandboxId and next(p.rules) then
    local values, verr = M.read_env(p, self.getenv)
    if not values then return nil, verr end
    self.env_values = values
    if self.endpoints.local_sandboxd then
      for _, h in ipairs(R.headers(p.rules)) do
        if h.secret then
          return nil, errors.new("E2B_CONFIG", ("%s: secret %s: no E2B endpoint is configured, and the embedded "
            .. "sandboxd starts with an empty secret store for each run: use fromEnv, or `moonbox secret set %s` and "
            .. "`moonbox run --background-sandboxd` (the background sandboxd keeps its store), or run a sandboxd of your "
            .. "own (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY)"):format(rule_text(p, h), h.secret, h.secret),
            { secret = h.secret })
        end
      end
    end
  end
  self.ready = events.event()
  -- Creation starts now; the providers wait on `ready` through owner:sandbox().
  sched.spawn(function()
    local pok, ok, err = pcall(self._setup, self)
    if not pok then ok, err = nil, errors.new("E2B_SETUP", "setup raised: " .. tostring(ok)) end
    if not ok then
      self.setup_error = err or errors.new("E2B_SETUP", "setup failed")
      -- nothing is left to serve: do not keep a local sandboxd until disposal
      if self.sandboxd then launcher.stop(self.sandboxd, self.timeouts) end
    end
    if ok and self.lifecycle.renewal_delay(config.timeoutMs) then
      self.renewer = sched.spawn(function() self:_renew_loop() end)
    end
    self.ready:set(true)
  end)
  return self
end

M.Owner = Owner
return M
