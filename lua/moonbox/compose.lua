-- moonbox.compose — compositions: a Lua file listing plugins and their config.
--
--   -- compose.lua
--   plugin "e2b" { cwd = "/home/user/workspace", timeoutMs = 300000 }
--   plugin "subprocess" {}
--   plugin "fs" {}                 -- any order: the loader orders by what each plugin injects
--   policies "./my-policies"       -- optional: a directory of policy files (env.lua, timeouts.lua …)
--   policies { env = "./strict-env.lua", timeouts = "./fast.lua" }   -- or one file per concern
--
-- The file runs as ordinary Lua (os.getenv etc. available). `plugin "name" {config}` mounts a
-- plugin once; config is checked against the plugin's schema. Policy files are merged over the
-- shipped defaults and checked before anything starts (moonbox.policies). Errors name
-- file:line and field.
local errors = require "moonbox.errors"
local policies_mod = require "moonbox.policies"
local fields_mod = require "moonbox.fields"
local mb = require "moonbox"
local core = require "moonbox.core"

local compose = {}

-- Warnings (what a composition asks for that cannot hold: a network policy on the host
-- providers). Each is written once per process to stderr, as "moonbox: warning: ...", unless the
-- caller of load gives opts.warn; every load lists them in comp.warnings.
local warned = {}
local function stderr_warn(msg)
  if warned[msg] then return end
  warned[msg] = true
  io.stderr:write("moonbox: warning: ", msg, "\n")
end

-- The origin of the first network field not left at its default.
local function set_by(origins)
  for _, f in ipairs({ "internet", "allow_out", "deny_out", "rules" }) do
    if origins[f].kind ~= "default" then return origins[f] end
  end
  return origins.internet
end

-- The network policy cannot be enforced by the host providers: what the policy says and that it
-- is not enforced, when it says anything (a non-default policy is a warning, not an error: the
-- same composition file may serve the host and a sandbox). → message | nil
function compose.network_warning(file, records, policies)
  for _, rec in ipairs(records) do
    if (rec.provides or rec.name) == "e2b" then return nil end
  end
  local p = policies.network
  if p.is_default() then return nil end
  local names = {}
  for _, rec in ipairs(records) do names[#names + 1] = rec.name end
  return ("%s: the network policy is NOT enforced: this composition runs on the host providers (%s), "
    .. "whose programs reach whatever the host reaches; only a sandbox (plugin \"e2b\") enforces it. It says: %s [%s]")
    :format(file, table.concat(names, ", "), p.summary(), policies_mod.origin_text(set_by(policies.origins.network)))
end

local function fail(message, fields)
  return nil, errors.new("COMPOSE_INVALID", message, fields)
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

local function absolute(path, base)
  if path:sub(1, 1) == "/" then return path end
  return (base or ".") .. "/" .. path
end

local function is_dir(path)
  local f = io.open(path, "r")
  if not f then return false end
  local _, _, code = f:read(0)
  f:close()
  return code == 21                        -- EISDIR: reading a directory
end

-- A fresh policy set: the shipped defaults, then `dir`'s files, then `overrides` (concern →
-- table of values). Raises the POLICY_INVALID error when something does not validate.
function compose.policies(dir, overrides)
  local layers = {}
  if dir then layers[#layers + 1] = { dir = dir, via = dir } end
  if overrides then layers[#layers + 1] = { values = overrides, via = "compose.policies overrides" } end
  local set, err = policies_mod.load(layers)
  if not set then error(err, 2) end
  return set
end

-- Check one plugin's config against its schema; fills defaults. → config | nil, message
-- schema: field → { type = "string"|"number"|"boolean"|"table", default = v | function(),
--                   required = bool, check = function(v) → nil | message, secret = bool }
local function check_config(schema, given, policies)
  local out = {}
  for field, value in pairs(given) do
    if type(field) ~= "string" then return nil, "config keys must be field names", tostring(field) end
    local spec = schema[field]
    if not spec then
      local names = {}
      for f in pairs(schema) do names[#names + 1] = f end
      table.sort(names)
      local near = fields_mod.nearest(field, names)
      return nil, ("unknown field (expected %s%s)"):format(table.concat(names, ", "), near and ("; the nearest is " .. near) or ""), field
    end
    if type(value) ~= spec.type then
      return nil, ("expected a %s, got %s"):format(spec.type, type(value)), field
    end
    if spec.check then
      local msg = spec.check(value)
      if msg then return nil, msg, field end
    end
    out[field] = value
  end
  local fields = {}
  for field in pairs(schema) do fields[#fields + 1] = field end
  table.sort(fields)
  for _, field in ipairs(fields) do
    local spec = schema[field]
    if out[field] == nil then
      local d = spec.default
      if type(d) == "function" then d = d(policies) end
      if d == nil and spec.required then return nil, "is required", field end
      out[field] = d
    end
  end
  return out
end

-- Load, validate and order a composition. opts: { policies = { concern → table of values },
-- policy_files = { concern → path } (the command line's --policy, applied last), source =
-- string (file contents instead of reading `file`), warn = function(message) (default: stderr,
-- once per process) }.
-- → { file, plugins = ordered records, policies } | nil, err (COMPOSE_INVALID, POLICY_INVALID)
-- A record: { name, module, provides, inject, config, line, where = "file:line" }.
function compose.load(file, opts)
  opts = opts or {}
  local records, by_name, policy_layer, problem = {}, {}, nil, nil
  -- file:line of the composition line calling into the DSL (level 3: caller of our caller).
  local function here()
    local info = debug.getinfo(3, "l")
    local line = info and info.currentline or 0
    return ("%s:%d"):format(file, line), line
  end
  local function complain(w, msg) problem = problem or (w .. ": " .. msg) end

  local env = setmetatable({}, { __index = _G })
  env.plugin = function(name)
    local w, line = here()
    if type(name) ~= "string" or name == "" then
      complain(w, "plugin name must be a non-empty string")
      return function() end
    end
    local rec = { name = name, where = w, line = line, given = {}, index = #records + 1 }
    if by_name[name] then
      complain(w, ("plugin %q mounted twice (first at %s)"):format(name, by_name[name].where))
    end
    records[#records + 1] = rec
    by_name[name] = by_name[name] or rec
    return function(config)
      if type(config) ~= "table" then
        complain((here()), ("plugin %q: config must be a table"):format(name))
        return
      end
      rec.given = config
    end
  end
  -- policies "dir" | policies { concern = "file", ... }: paths relative to the composition.
  env.policies = function(what)
    local w = here()
    if policy_layer then complain(w, ("policies given twice (first at %s)"):format(policy_layer.via)) return end
    local base = dirname(file)
    if type(what) == "string" then
      local dir = absolute(what, base)
      if not is_dir(dir) then complain(w, ("policies %q: not a directory: %s"):format(what, dir)) return end
      policy_layer = { dir = dir, via = w }
    elseif type(what) == "table" then
      local files = {}
      for concern, path in pairs(what) do
        if not policies_mod.is_concern(concern) then
          complain(w, ("policies: unknown concern %q (expected %s)"):format(tostring(concern), policies_mod.concern_list()))
          return
        end
        if type(path) ~= "string" then complain(w, ("policies: %s must be a file path"):format(concern)) return end
        files[concern] = absolute(path, base)
      end
      policy_layer = { files = files, via = w }
    else
      complain(w, 'policies expects a directory path or a table { env = "file.lua", ... }')
    end
  end

  local chunk, lerr
  if opts.source then chunk, lerr = load(opts.source, "@" .. file, "t", env)
  else chunk, lerr = loadfile(file, "t", env) end
  if not chunk then return fail(lerr) end
  local ok, rerr = pcall(chunk)
  if not ok then return fail(tostring(rerr)) end
  if problem then return fail(problem) end
  if #records == 0 then return fail(file .. ": no plugin mounted (write plugin \"e2b\" { ... })") end

  local layers = { policy_layer }
  if opts.policies then layers[#layers + 1] = { values = opts.policies, via = "compose.load opts.policies" } end
  for _, concern in ipairs(policies_mod.CONCERNS) do
    local path = opts.policy_files and opts.policy_files[concern]
    if path then layers[#layers + 1] = { files = { [concern] = path }, via = ("--policy %s=%s"):format(concern, path) } end
  end
  local policies, perr = policies_mod.load(layers)
  if not policies then return nil, perr end
  local registry = policies.composition.plugins
  local warnings = {}

  for _, rec in ipairs(records) do
    local modname = registry[rec.name]
    if not modname then
      local known = {}
      for k in pairs(registry) do known[#known + 1] = k end
      table.sort(known)
      return fail(("%s: unknown plugin %q (known: %s)"):format(rec.where, rec.name, table.concat(known, ", ")),
        { plugin = rec.name })
    end
    local mok, mod = pcall(require, modname)
    if not mok then return fail(("%s: plugin %q: cannot load %s: %s"):format(rec.where, rec.name, modname, tostring(mod))) end
    rec.module, rec.impl = modname, mod
    rec.provides = mod.provides or rec.name
    rec.inject = mod.inject or {}
    local config, msg, field = check_config(mod.schema or {}, rec.given, policies)
    if not config then
      return fail(("%s: plugin %q: field %s: %s"):format(rec.where, rec.name, tostring(field), msg),
        { plugin = rec.name, field = field })
    end
    rec.config = config
    if mod.validate then            -- the plugin's own rules over its config and the policies
      local bad, warns = mod.validate(config, policies, ("%s: plugin %q"):format(rec.where, rec.name))
      if bad then return fail(("%s: plugin %q: %s"):format(rec.where, rec.name, bad), { plugin = rec.name }) end
      for _, w in ipairs(warns or {}) do warnings[#warnings + 1] = w end
    end
  end

  local ordered, oerr, culprit = policies.composition.order(records)
  if not ordered then
    return fail(("%s: %s"):format(culprit and culprit.where or file, oerr))
  end
  local nw = compose.network_warning(file, records, policies)
  if nw then warnings[#warnings + 1] = nw end
  local warn = opts.warn or stderr_warn
  for _, w in ipairs(warnings) do warn(w) end
  -- a reload that makes the network policy say something on the host warns then
  policies.on_reload = function(set)
    local w = compose.network_warning(file, records, set)
    if w then warn(w) end
  end
  return { file = file, plugins = ordered, policies = policies, policy_layer = policy_layer, warnings = warnings }
end

-- Instantiate plugins in order on a fresh ctx. Must run inside a moonbox task (plugins do I/O).
-- → ctx, loaded | nil, err (everything loaded so far is disposed again, in reverse)
function compose.start(comp)
  -- e2b_endpoints: where the e2b plugin's endpoint is when no E2B variable names one (the
  -- background sandboxd, set by `moonbox sync` and `moonbox run --background-sandboxd`)
  local ctx = { policies = comp.policies, composition = comp, e2b_endpoints = comp.e2b_endpoints }
  local loaded = {}
  for _, rec in ipairs(comp.plugins) do
    local ok, inst, err = pcall(rec.impl.new, ctx, rec.config)
    if not ok or not inst then
      compose.stop(ctx, loaded)
      if not ok then error(inst, 0) end
      return nil, err
    end
    ctx[rec.provides] = inst
    loaded[#loaded + 1] = { rec = rec, inst = inst }
  end
  return ctx, loaded
end

-- Dispose in the composition policy's order (reverse of load). Every plugin is disposed even
-- when an earlier one fails; → true | nil, err (the first failure, others in err.others).
function compose.stop(ctx, loaded)
  local first, others = nil, {}
  for _, item in ipairs(ctx.policies.composition.dispose_order(loaded)) do
    local ok, r, err = pcall(function() return item.inst:dispose() end)
    local e = (not ok and r) or (ok and r == nil and err) or nil
    if e then
      if first then others[#others + 1] = e else first = e end
    end
    ctx[item.rec.provides] = nil
  end
  if first then
    if type(first) == "table" then first.others = (#others > 0) and others or nil return nil, first end
    return nil, errors.new("COMPOSE_DISPOSE", tostring(first), { others = others })
  end
  return true
end

local SIGNALS = { SIGHUP = 1, SIGINT = 2, SIGTERM = 15 }

-- The script runs in a task of its own so that SIGTERM, SIGINT or SIGHUP can end it: the
-- script is canceled (its next yielding call returns MB_CANCELED), gets the timeouts policy's
-- signal_grace_ms to wind down, and then the composition is disposed whatever it does (the
-- sandbox deleted, a local sandboxd stopped with its state directory). The result is then
-- 128 + the signal's number. A second signal while disposing exits at once.
local function run_in_task(comp, script_file, ...)
  local env = setmetatable({}, { __index = _G })
  local sfn, serr
  if type(script_file) == "function" then sfn = script_file          -- a caller's own (moonbox sync)
  else sfn, serr = loadfile(script_file, "t", env) end
  if not sfn then error(serr, 0) end
  local signaled, disposing
  local wake = mb.event()
  local watches = {}
  for name in pairs(SIGNALS) do
    watches[#watches + 1] = core.signal(name, function()
      if disposing then os.exit(128 + SIGNALS[name], false) end
      signaled = signaled or name
      wake:set()
    end)
  end
  local function unwatch() for _, w in ipairs(watches) do w:close() end end
  local ctx, loaded = compose.start(comp)
  if not ctx then unwatch() error(loaded, 0) end
  env.ctx = ctx
  local args = table.pack(...)
  local res
  local script = mb.spawn(function()
    res = table.pack(xpcall(sfn, debug.traceback, ctx, table.unpack(args, 1, args.n)))
    wake:set()
  end)
  wake:wait()
  if signaled and not res then
    script:cancel()
    local grace = comp.policies.timeouts.signal_grace_ms
    script:join(grace)
  end
  disposing = true
  local dok, derr = compose.stop(ctx, loaded)
  unwatch()
  if signaled then
    io.stderr:write(("moonbox: %s: the composition was disposed%s\n"):format(signaled,
      dok and "" or (" with an error: " .. tostring(derr))))
    return 128 + SIGNALS[signaled]
  end
  if not res[1] then error(res[2], 0) end
  if not dok then error(derr, 0) end
  -- A script may return an epilogue: it runs after disposal (e.g. to show nothing is left).
  if type(res[2]) == "function" then return res[2]() end
  return table.unpack(res, 2, res.n)
end

-- `moonbox run compose.lua script.lua [args]`: the script is called with (ctx, args...) and also
-- sees `ctx` as a global (script_file may also be a function, called the same way). Plugins are disposed in reverse order whether or not it fails. When
-- the script returns a function, it is called after disposal and its results are returned.
-- After SIGTERM, SIGINT or SIGHUP the result is 128 + the signal's number (see run_in_task).
-- `composition` is a file name, or what compose.load returned.
function compose.run(composition, script_file, ...)
  local comp, err = composition, nil
  if type(composition) ~= "table" then
    comp, err = compose.load(composition)
    if not comp then error(err, 0) end
  end
  if mb.current() then return run_in_task(comp, script_file, ...) end
  return mb.run(run_in_task, comp, script_file, ...)
end

local function show(v)
  if type(v) == "string" then return ("%q"):format(v) end
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = k .. " = " .. show(v[k]) end
    return "{ " .. table.concat(parts, ", ") .. " }"
  end
  return tostring(v)
end

-- The resolved tree as text: only mounted plugins, load order, config with defaults (secrets
-- redacted), dispose order. → text | nil, err. `moonbox dump-config` prints it.
function compose.describe(comp)
  local lines = { "composition " .. comp.file }
  for i, rec in ipairs(comp.plugins) do
    local inj = #rec.inject > 0 and (" injects " .. table.concat(rec.inject, ", ")) or ""
    lines[#lines + 1] = ("%d. %s (%s) provides %s%s  [%s]"):format(i, rec.name, rec.module, rec.provides, inj, rec.where)
    local schema = rec.impl.schema or {}
    local fields = {}
    for f in pairs(schema) do fields[#fields + 1] = f end
    table.sort(fields)
    for _, f in ipairs(fields) do
      local v = rec.config[f]
      if v == nil then v = "(unset)"
      elseif schema[f].secret then v = "<redacted>"
      else v = show(v) end
      lines[#lines + 1] = ("     %s = %s"):format(f, v)
    end
  end
  local names = {}
  for i = #comp.plugins, 1, -1 do names[#names + 1] = comp.plugins[i].name end
  lines[#lines + 1] = "dispose order: " .. table.concat(names, ", ")
  -- Every policy value and where it came from (default, file:line, command line).
  for _, l in ipairs(comp.policies:describe()) do lines[#lines + 1] = l end
  return table.concat(lines, "\n") .. "\n"
end

function compose.dump(file, opts)
  local comp, err = compose.load(file, opts)
  if not comp then return nil, err end
  local text = compose.describe(comp)
  if not (opts and opts.quiet) then io.write(text) end
  return text
end

return compose
