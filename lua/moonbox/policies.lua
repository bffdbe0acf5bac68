-- moonbox.policies — policy sets: the shipped defaults merged with the user's files, checked,
-- explained and reloaded. What `ctx.policies` is, and what `moonbox policy` prints.
--
--   local policies = require "moonbox.policies"
--   local set = assert(policies.load{ { files = { env = "./strict-env.lua" }, via = "my harness" } })
--   set.env.build(ambient, explicit)      -- the rules read the merged values
--   policies.explain_env(set, ambient, explicit)   -- kept / dropped / set / overridden / deleted
--   set:reload()                          -- re-read every file; refused (old kept) when invalid
--
-- Five concerns: env, lifecycle, timeouts, composition, network. The shipped defaults are plain Lua
-- files (policies/<concern>.lua in a checkout, moonbox/policies/<concern>.lua installed). A
-- layer is one of { dir = path } (whichever <concern>.lua files it holds), { files = {
-- concern = path } } or { values = { concern = table } }, with `via` naming who asked for it
-- (a composition line, a command-line option). Layers apply in order, each merged over the
-- previous one: a field a layer sets replaces the value (a map is merged key by key; `false`
-- removes a key). Every field is checked against its concern's schema (moonbox.policy.<concern>)
-- and every error is one line naming file:line, the field and what was expected
-- (POLICY_INVALID). Each value remembers where it came from (set.origins).
local errors = require "moonbox.errors"
local S = require "moonbox.policy.schema"
local source = require "moonbox.policy.source"
local policy_env = require "moonbox.policy.env"
local policy_lifecycle = require "moonbox.policy.lifecycle"
local policy_timeouts = require "moonbox.policy.timeouts"
local policy_composition = require "moonbox.policy.composition"
local policy_network = require "moonbox.policy.network"

local M = {}

M.CONCERNS = { "env", "lifecycle", "timeouts", "composition", "network" }
local KINDS = {}
KINDS.env, KINDS.lifecycle, KINDS.timeouts = policy_env, policy_lifecycle, policy_timeouts
KINDS.composition, KINDS.network = policy_composition, policy_network
M.kinds = KINDS

local function fail(message) return nil, errors.new("POLICY_INVALID", message) end

function M.is_concern(c) return type(c) == "string" and KINDS[c] ~= nil end
function M.concern_list() return "env, lifecycle, timeouts, composition or network" end

-- "CONCERN=FILE" (moonbox --policy, mb_runtime_open) → concern, path | nil, message
function M.parse_arg(v)
  local c, path = tostring(v):match("^([^=]*)=(.+)$")
  if not c then return nil, ("%s: expected CONCERN=FILE"):format(tostring(v)) end
  if not M.is_concern(c) then
    return nil, ("%s: unknown concern %q (expected %s)"):format(tostring(v), c, M.concern_list())
  end
  return c, path
end

-- A path as people read it: relative to the working directory when below it.
local function shown(path)
  local cwd = os.getenv("PWD")
  path = path:gsub("/%./", "/"):gsub("^%./", "")
  if cwd and cwd ~= "/" and path:sub(1, #cwd + 1) == cwd .. "/" then return path:sub(#cwd + 2) end
  return path
end
M.shown = shown

local function readable(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local ok = f:read(0) ~= nil or f:read("a") ~= nil
  f:close()
  return ok
end

-- "a/lua/moonbox/../../policies" → "a/policies" (segments only: no file system access).
local function normalize(path)
  local out, abs = {}, path:sub(1, 1) == "/"
  for seg in path:gmatch("[^/]+") do
    if seg == ".." and #out > 0 and out[#out] ~= ".." then out[#out] = nil
    elseif seg ~= "." then out[#out + 1] = seg end
  end
  return (abs and "/" or "") .. table.concat(out, "/")
end

-- This file's directory: <lua tree>/moonbox.
local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

-- The shipped defaults of a concern: next to this module once installed (moonbox/policies/),
-- or the checkout's policies/ directory. → path | nil
function M.default_file(concern)
  for _, p in ipairs({ HERE .. "/policies/" .. concern .. ".lua", HERE .. "/../../policies/" .. concern .. ".lua" }) do
    if readable(p) then return normalize(p) end
  end
  return nil
end

local sorted_keys = S.sorted_keys

-- Merges one source (from source.read, or a table of values) over values/origins.
-- kind: "default" | "file" | "values". → true | nil, message
local function apply(concern, values, origins, src, via, kind)
  local K = KINDS[concern]
  local function at(line)
    if not src.path then return via end
    return shown(src.path) .. ":" .. (line or src.return_line or 1)
  end
  for _, field in ipairs(sorted_keys(src.fields)) do
    local v = src.fields[field]
    local where = at(src.lines[field])
    local spec = type(field) == "string" and K.schema[field] or nil
    if not spec then
      local near = type(field) == "string" and S.nearest(field, K.fields)
      return nil, ("%s: %s policy: unknown field %s (expected one of %s%s)"):format(where, concern,
        type(field) == "string" and field or S.show(field), table.concat(K.fields, ", "),
        near and ("; the nearest is " .. near) or "")
    end
    local msg, part = S.check(spec, v)
    if msg then
      local item_line = type(part) == "number" and src.items and src.items[field] and src.items[field][part]
        or part ~= nil and src.keys and src.keys[field] and src.keys[field][part]
      local name = field
      if type(part) == "number" then name = ("%s[%d]"):format(field, part)
      elseif type(part) == "string" and part:match("^[%a_][%w_]*$") then name = ("%s.%s"):format(field, part)
      elseif part ~= nil then name = ("%s[%s]"):format(field, S.show(part)) end
      return nil, ("%s: %s policy: field %s: %s"):format(item_line and at(item_line) or where, concern, name, msg)
    end
    local o = { where = where, via = via, kind = kind, items = {} }
    if spec.kind == "map" then
      local cur = values[field] or {}
      local prev = origins[field]
      if prev then for k, w in pairs(prev.items) do o.items[k] = w end end
      for k, x in pairs(v) do
        if x == false then cur[k] = nil else cur[k] = S.copy(x) end
        local l = src.keys and src.keys[field] and src.keys[field][k]
        o.items[k] = l and at(l) or where
      end
      values[field] = cur
    else
      values[field] = S.copy(v)
      if spec.kind == "list" then
        for i in ipairs(v) do
          local l = src.items and src.items[field] and src.items[field][i]
          o.items[i] = l and at(l) or where
        end
      end
    end
    origins[field] = o
  end
  return true
end

local function with_via(msg, via) return via and (msg .. " (from " .. via .. ")") or msg end

-- The merged values and origins of every concern. → { values, origins } | nil, err
local function build(layers)
  local out = { values = {}, origins = {} }
  for _, c in ipairs(M.CONCERNS) do
    local K = KINDS[c]
    local path = M.default_file(c)
    if not path then
      return fail(("no shipped %s policy found (moonbox/policies/%s.lua next to %s)"):format(c, c, HERE))
    end
    local src, rerr = source.read(path)
    if not src then return fail(rerr) end
    local values, origins = {}, {}
    local ok, aerr = apply(c, values, origins, src, "default", "default")
    if not ok then return fail(aerr) end
    for _, f in ipairs(K.fields) do
      if values[f] == nil then
        return fail(("%s: %s policy: field %s is missing (the shipped defaults set every field)"):format(shown(path), c, f))
      end
    end
    local defaults = S.copy(values)
    for _, layer in ipairs(layers) do
      local file = layer.files and layer.files[c]
      if layer.dir then
        local p = layer.dir .. "/" .. c .. ".lua"
        if readable(p) then file = p end
      end
      if file then
        local fsrc, ferr = source.read(file, S.copy(defaults))
        if not fsrc then
          if ferr:match("^cannot read ") then return fail((layer.via and (layer.via .. ": ") or "") .. ferr) end
          return fail(with_via(ferr, layer.via))
        end
        ok, aerr = apply(c, values, origins, fsrc, layer.via, "file")
        if not ok then return fail(with_via(aerr, layer.via)) end
      end
      local given = layer.values and layer.values[c]
      if given ~= nil then
        if type(given) ~= "table" then
          return fail(("%s: %s policy: expected a table of fields, got %s"):format(layer.via or "values", c, type(given)))
        end
        ok, aerr = apply(c, values, origins, { fields = given, lines = {} }, layer.via or "values", "values")
        if not ok then return fail(aerr) end
      end
    end
    if K.check then
      local msg, fields, key = K.check(values)
      if msg then
        local field = fields[1]
        for _, f in ipairs(fields) do if origins[f].kind ~= "default" then field = f break end end
        local o = origins[field]
        local where = o.where
        if key ~= nil then
          o = origins[fields[1]]
          field, where = ("%s[%s]"):format(fields[1], S.show(key)), o.items[key] or o.where
        end
        return fail(with_via(("%s: %s policy: field %s: %s"):format(where, c, field, msg), o.kind == "file" and o.via or nil))
      end
    end
    out.values[c], out.origins[c] = values, origins
  end
  return out
end

local function check_layers(layers)
  if type(layers) ~= "table" then error("policies.load: layers must be a list", 3) end
  for i, l in ipairs(layers) do
    if type(l) ~= "table" then error(("policies.load: layer %d must be a table"):format(i), 3) end
    if l.dir ~= nil and type(l.dir) ~= "string" then error(("policies.load: layer %d: dir must be a path"):format(i), 3) end
    for _, key in ipairs({ "files", "values" }) do
      if l[key] ~= nil then
        if type(l[key]) ~= "table" then error(("policies.load: layer %d: %s must be a table"):format(i, key), 3) end
        for c in pairs(l[key]) do
          if not KINDS[c] then
            error(("policies.load: layer %d: %s: unknown concern %s (expected %s)"):format(i, key, S.show(c), M.concern_list()), 3)
          end
        end
      end
    end
  end
end

------------------------------------------------------------------------------------------------
local Set = {}
Set.__index = Set

local function bind_all(set, r)
  for _, c in ipairs(M.CONCERNS) do
    local p = set[c] or {}
    for k in pairs(p) do p[k] = nil end
    for k, v in pairs(S.copy(r.values[c])) do p[k] = v end
    set[c] = KINDS[c].bind(p, r.origins[c])
  end
  set.values, set.origins = r.values, r.origins
end

-- A policy set from the shipped defaults and `layers` (see above). → set | nil, err
function M.load(layers)
  layers = layers or {}
  check_layers(layers)
  local r, err = build(layers)
  if not r then return nil, err end
  local set = setmetatable({ layers = layers }, Set)
  bind_all(set, r)
  return set
end

-- The shipped defaults alone, loaded once (what a provider uses when its ctx has no policies).
local defaults_set
function M.defaults()
  if not defaults_set then defaults_set = assert(M.load({})) end
  return defaults_set
end
function M.default(concern) return M.defaults()[concern] end

-- Re-reads every file of the set (edited files take effect), with `changes` (concern → path)
-- pointing concerns at other files. The tables consumers hold are updated in place: the next
-- spawn, terminal or request uses the new values. A set that fails validation is refused and
-- the old values are kept. → true | nil, err
function Set:reload(changes)
  local layers = {}
  for _, l in ipairs(self.layers) do if not l.reload then layers[#layers + 1] = l end end
  local files = {}
  for _, l in ipairs(self.layers) do if l.reload then for c, p in pairs(l.files) do files[c] = p end end end
  if changes ~= nil then
    if type(changes) ~= "table" then error("policies:reload: changes must be a table of concern = path", 2) end
    for c, p in pairs(changes) do
      if not KINDS[c] then error(("policies:reload: unknown concern %s (expected %s)"):format(S.show(c), M.concern_list()), 2) end
      if type(p) ~= "string" then error(("policies:reload: %s must be a path"):format(c), 2) end
      files[c] = p
    end
  end
  if next(files) then layers[#layers + 1] = { files = files, via = "reload", reload = true } end
  local r, err = build(layers)
  if not r then return nil, err end
  bind_all(self, r)
  self.layers = layers
  if self.on_reload then self.on_reload(self) end     -- compose: a network policy on the host warns
  return true
end

-- Where a value came from, as people read it: "default (policies/env.lua:21)",
-- "strict-env.lua:2 (compose.lua:3)", "fast.lua:1 (--policy timeouts=fast.lua)".
function M.origin_text(o)
  if not o then return "?" end
  if o.kind == "default" then return "default (" .. o.where .. ")" end
  if o.kind == "values" then return o.where end
  return o.where .. " (" .. tostring(o.via) .. ")"
end

-- Every value of the set with where it came from: → list of { concern, field, value, origin }
function Set:entries()
  local out = {}
  for _, c in ipairs(M.CONCERNS) do
    for _, f in ipairs(KINDS[c].fields) do
      local o = self.origins[c][f]
      out[#out + 1] = { concern = c, field = f, value = self.values[c][f], origin = o, from = M.origin_text(o),
        default = o.kind == "default" }
    end
  end
  return out
end

-- Text lines for dump-config: each concern's values and where each came from.
function Set:describe()
  local lines = {}
  for _, c in ipairs(M.CONCERNS) do
    lines[#lines + 1] = "policy " .. c
    for _, e in ipairs(self:entries()) do
      if e.concern == c then
        lines[#lines + 1] = ("     %s = %s  [%s]"):format(e.field, S.format(e.value), e.from)
      end
    end
  end
  return lines
end

------------------------------------------------------------------------------------------------
-- Explaining and checking (what `moonbox policy` prints).

-- What the env policy of `set` (default: the shipped one) does to `ambient` plus `explicit`
-- entries. opts.explicit_where(name) names where an explicit entry came from.
-- → { entries = { { name, verdict, rule, where, over, was, value } ... }, env } | nil, err
function M.explain_env(set, ambient, explicit, opts)
  set = set or M.defaults()
  local r, msg = set.env.report(ambient, explicit, opts and opts.explicit_where)
  if not r then return nil, errors.new("POLICY_INVALID", msg) end
  return r
end

-- The effective clocks of `set`. e2b (optional): the e2b plugin's config and where it was
-- written ({ timeoutMs =, where = "compose.lua:5" }). → list of { name, ms | nil, text, where }
function M.clocks(set, e2b)
  set = set or M.defaults()
  local t, l = set.timeouts, set.lifecycle
  local ot, ol = set.origins.timeouts, set.origins.lifecycle
  local out = {}
  local function add(name, ms, text, where) out[#out + 1] = { name = name, ms = ms, text = text, where = where } end
  local function from(origins, field) return M.origin_text(origins[field]) end
  local lease, lease_from = l.default_timeout_ms, from(ol, "default_timeout_ms") .. " default_timeout_ms"
  if e2b and e2b.timeoutMs then lease, lease_from = e2b.timeoutMs, (e2b.where or "composition") .. " (plugin \"e2b\" timeoutMs)" end
  add("sandbox lease", lease, "asked for at create/connect", lease_from)
  local delay = l.renewal_delay(lease)
  if delay then
    add("lease renewal", delay, ("renewed once less than %s of the lease is left, at least %s ms apart")
      :format(S.show(l.renew_below_fraction), S.show(l.min_renew_interval_ms)),
      from(ol, "renew_below_fraction") .. "; " .. from(ol, "min_renew_interval_ms"))
  else
    add("lease renewal", nil, "off: the sandbox expires after its lease", from(ol, "renew"))
  end
  add("command deadline", nil, "none: a command's deadline belongs to the caller (moonbox arms none)")
  add("command grace", nil, "TERM → KILL after the graceMs each spawn must give")
  add("terminal grace", t.terminal_grace_ms, "TERM → KILL when spawnTerminal gives no graceMs", from(ot, "terminal_grace_ms"))
  add("stream idle", t.stream_idle_ms, "a silent stream is a dead connection (never kills the process)", from(ot, "stream_idle_ms"))
  add("keepalive interval", t.keepalive_interval_s * 1000, "Keepalive-Ping-Interval on envd streams", from(ot, "keepalive_interval_s"))
  add("stream open", t.stream_open_ms, "until a stream's response headers arrive", from(ot, "stream_open_ms"))
  add("request", t.request_ms, "control plane and envd unary calls, /files transfers", from(ot, "request_ms"))
  add("create", t.create_ms, "creating a sandbox", from(ot, "create_ms"))
  add("tool", t.tool_ms, "mbwrap tool calls (realpath, stat, publish, which, fg, …)", from(ot, "tool_ms"))
  add("sandboxd start", t.sandboxd_start_ms, "local sandboxd: until it listens", from(ot, "sandboxd_start_ms"))
  add("sandboxd stop grace", t.sandboxd_stop_grace_ms, "local sandboxd: TERM → KILL", from(ot, "sandboxd_stop_grace_ms"))
  add("signal grace", t.signal_grace_ms, "moonbox run: the script's time to wind down after a signal", from(ot, "signal_grace_ms"))
  return out
end

-- Which concern a policy file is for: its name (env.lua …), else the one whose fields it sets.
-- → concern | nil, err
function M.concern_of(path)
  local base = path:match("([^/]+)%.lua$")
  if base and KINDS[base] then return base end
  local fits = {}
  for _, c in ipairs(M.CONCERNS) do
    local dpath = M.default_file(c)
    local d = dpath and source.read(dpath)
    local src, err = source.read(path, d and S.copy(d.fields) or {})
    if not src then
      if err:match("^cannot read ") then return nil, errors.new("POLICY_INVALID", err) end
    else
      local all = next(src.fields) ~= nil
      for f in pairs(src.fields) do if not KINDS[c].schema[f] then all = false end end
      if all then fits[#fits + 1] = c end
    end
  end
  if #fits == 1 then return fits[1] end
  return nil, errors.new("POLICY_INVALID", ("%s: cannot tell which policy this file is for (%s): name it CONCERN=%s with CONCERN one of %s")
    :format(path, #fits == 0 and "its fields belong to no single policy" or "it sets no field", path, M.concern_list()))
end

-- Validates one policy file for `concern` (default: concern_of) over the defaults and `base`
-- layers. → { concern, path, changes = { { field, from, to, where } }, unchanged = n } | nil, err
function M.check(path, concern, base)
  if concern == nil then
    local c, err = M.concern_of(path)
    if not c then return nil, err end
    concern = c
  end
  if not KINDS[concern] then error(("policies.check: unknown concern %s"):format(S.show(concern)), 2) end
  local layers = {}
  for _, l in ipairs(base or {}) do layers[#layers + 1] = l end
  local before, berr = M.load(layers)
  if not before then return nil, berr end
  layers[#layers + 1] = { files = { [concern] = path }, via = path, checked = true }
  local after, err = M.load(layers)
  if not after then return nil, err end
  local report = { concern = concern, path = path, changes = {}, unchanged = 0, set_fields = 0 }
  for _, f in ipairs(KINDS[concern].fields) do
    local o = after.origins[concern][f]
    local a, b = before.values[concern][f], after.values[concern][f]
    if o.via == path and o.kind == "file" then
      report.set_fields = report.set_fields + 1
      report.changes[#report.changes + 1] = { field = f, from = a, to = b, where = o.where, same = S.equal(a, b) }
    else
      report.unchanged = report.unchanged + 1
    end
  end
  return report
end

return M
