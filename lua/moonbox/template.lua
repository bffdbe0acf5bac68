-- moonbox.template — a sandbox template described in Lua: where it starts from, its steps (RUN,
-- COPY, ENV, WORKDIR, USER, as E2B's Template builder has them), its start command with a ready
-- check, its sandboxes' CPUs and memory. A description only: moonbox.e2b.template builds it
-- (client:buildTemplate, `moonbox template build`).
--
--   local T = require "moonbox.template"
--   local desc, err = T.template {
--     from = "base",                                   -- or image = "e2bdev/base"
--     steps = { T.run "apt-get install -y jq", T.run { "make", "make install", user = "root" },
--               T.copy { "src", "/app/src", mode = "755", user = "user" }, T.env { MODE = "prod" },
--               T.workdir "/app", T.user "user" },
--     start = { "python3 -m http.server 8000", ready = T.port(8000) },
--     cpu = 2, memoryMB = 1024, skipCache = false, context = "." }
--   local desc, err = T.load("app.template.lua")   -- a file: these names are its globals
--
-- The step constructors and ready helpers never raise: what they were given is checked by
-- template{} (and load), which returns nil, err (TEMPLATE_INVALID) naming the field, the step
-- (steps[2] (run)) and the file:line of the call. Ready helpers are E2B's: the same commands
-- the SDK's waitForPort / waitForURL / waitForProcess / waitForFile / waitForTimeout send.
-- A base-layer module (errors, fields only).
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"

local M = {}

local Step, Ready, Desc = {}, {}, {}
M.Desc = Desc

-- The fields of each table a description is made of (strict: anything else is an error).
M.FIELDS = { "from", "image", "steps", "start", "cpu", "memoryMB", "skipCache", "context" }
M.START_FIELDS = { "ready" }
M.STEP_FIELDS = { run = { "user", "force" }, copy = { "user", "mode", "force" }, env = {},
  workdir = { "force" }, user = { "force" } }
M.STEPS = { "run", "copy", "env", "workdir", "user" }

-- "file.lua:12" of the function that called the constructor (level: as debug.getinfo counts).
local function caller(level)
  local info = debug.getinfo(level + 1, "Sl")
  if not info or info.currentline < 0 then return nil end
  return ("%s:%d"):format(info.short_src, info.currentline)
end

local function show(v)
  if type(v) == "string" then return ("%q"):format(v) end
  return type(v) == "table" and "a table" or tostring(v)
end

-- A table's list part and its named part: n == #t and every other key a string. → list, named | nil, why
local function split(t)
  local list, named, n = {}, {}, 0
  for k in pairs(t) do if math.type(k) == "integer" and k >= 1 then n = n + 1 end end
  for i = 1, n do
    if t[i] == nil then return nil, "its list part has a hole" end
    list[i] = t[i]
  end
  for k, v in pairs(t) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then
      if type(k) ~= "string" then return nil, ("key %s is neither a position nor a name"):format(show(k)) end
      named[k] = v
    end
  end
  return list, named
end

local function env_name(k) return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil end

-- ---- steps ----------------------------------------------------------------------------------
-- Each step: { kind, where, type (wire), args, force, src, dest } or { kind, where, err }.

local function step_of(kind, given, where)
  local s = setmetatable({ kind = kind, where = where }, Step)
  local function bad(fmt, ...) s.err = fmt:format(...) return s end
  local list, named
  if type(given) == "string" then list, named = { given }, {}
  elseif type(given) == "table" and getmetatable(given) == nil then
    local why
    list, why = split(given)
    if not list then return bad("%s", why) end
    named = why
  else
    return bad("expects a string or a table, got %s", show(given))
  end
  if kind ~= "env" then
    local msg = fields.unknown(named, M.STEP_FIELDS[kind], kind)
    if msg then return bad("%s", (msg:gsub("^" .. kind .. ": ", ""))) end
  end
  local force = kind ~= "env" and named.force or nil
  if force ~= nil and type(force) ~= "boolean" then return bad("force must be a boolean, got %s", show(force)) end
  s.force = force == true
  local user = named.user
  if kind ~= "env" and user ~= nil and (type(user) ~= "string" or not user:match("^[%w_][%w_.%-]*:?[%w_.%-]*$")) then
    return bad("user must be a user name (user or user:group), got %s", show(user))
  end
  for i, v in ipairs(list) do
    if type(v) ~= "string" then return bad("[%d] must be a string, got %s", i, show(v)) end
    if v:find("\0", 1, true) then return bad("[%d] holds a NUL byte", i) end
  end
  if kind == "run" then
    if #list == 0 then return bad("expects a command (run \"make\" or run { \"make\", \"make install\", user = \"root\" })") end
    for i, v in ipairs(list) do if not v:match("%S") then return bad("[%d]: an empty command", i) end end
    s.type, s.args = "RUN", { table.concat(list, " && ") }
    if user then s.args[2] = user end
  elseif kind == "copy" then
    if #list ~= 2 then return bad("expects { SRC, DEST } (copy { \"src\", \"/app/src\", mode = \"755\" }), got %d strings", #list) end
    local src, dest = list[1], list[2]
    local norm = src:gsub("/+$", ""):gsub("^%./", "")
    if norm == "" then norm = "." end
    if src:sub(1, 1) == "/" then return bad("[1]: the source %q must be relative to the template's context directory", src) end
    if src:find("[*?%[]") then return bad("[1]: the source %q is a pattern: name a file or a directory", src) end
    for part in (norm .. "/"):gmatch("([^/]*)/") do
      if part == ".." then return bad("[1]: the source %q leaves the template's context directory", src) end
    end
    if dest == "" then return bad("[2]: the destination must not be empty") end
    local mode = named.mode
    if mode ~= nil and (type(mode) ~= "string" or not mode:match("^[0-7]+$") or #mode > 4) then
      return bad("mode must be an octal string such as \"755\" or \"0644\", got %s", show(mode))
    end
    s.type, s.src, s.dest = "COPY", norm, dest
    s.args = { norm, dest, user or "", mode and ("%04o"):format(tonumber(mode, 8)) or "" }
  elseif kind == "env" then
    if #list > 0 then return bad("expects a table of NAME = value, got a list") end
    local names = {}
    for k, v in pairs(named) do
      if not env_name(k) then return bad("%s is not an environment variable name", show(k)) end
      if type(v) ~= "string" and type(v) ~= "number" then return bad("%s must be a string, got %s", k, show(v)) end
      names[#names + 1] = k
    end
    if #names == 0 then return bad("expects at least one NAME = value") end
    table.sort(names)                                  -- one order: the same step, the same cache key
    s.type, s.args = "ENV", {}
    for _, k in ipairs(names) do s.args[#s.args + 1] = k; s.args[#s.args + 1] = tostring(named[k]) end
  else   -- workdir, user
    if #list ~= 1 or list[1] == "" then return bad("expects one %s", kind == "workdir" and "directory" or "user name") end
    if kind == "user" and not list[1]:match("^[%w_][%w_.%-]*$") then return bad("%s is not a user name", show(list[1])) end
    s.type, s.args = kind == "workdir" and "WORKDIR" or "USER", { list[1] }
  end
  return s
end

-- run "cmd" | run { "cmd", "cmd2", user = "root", force = true }: commands joined by " && ",
-- run by bash as the user (else the current USER).
function M.run(given) return step_of("run", given, caller(2)) end
-- copy { SRC, DEST, mode = "755", user = "user", force = true }: SRC (a file or a directory,
-- relative to the context directory) into DEST as Docker's COPY does.
function M.copy(given) return step_of("copy", given, caller(2)) end
-- env { NAME = "value", ... }: set for the following steps and the template's sandboxes.
function M.env(given) return step_of("env", given, caller(2)) end
-- workdir "/app": made when missing; the following steps' and the sandboxes' directory.
function M.workdir(given) return step_of("workdir", given, caller(2)) end
-- user "user": the following steps' user.
function M.user(given) return step_of("user", given, caller(2)) end

-- ---- ready checks ---------------------------------------------------------------------------

-- A shell word: as it is when it holds only safe characters, else single-quoted.
local function quote(s)
  if s == "" then return "''" end
  if not s:find("[^%w@%%+=:,./_%-]") then return s end
  return "'" .. s:gsub("'", "'\"'\"'") .. "'"
end

local function ready(kind, cmd, err)
  return setmetatable({ kind = kind, cmd = cmd, err = err, where = caller(3) }, Ready)
end

-- port(8000): ready when something listens on the port (ss).
function M.port(n)
  if math.type(n) ~= "integer" or n < 1 or n > 65535 then return (ready("port", nil, "port(N): N must be an integer 1..65535, got " .. show(n))) end
  return (ready("port", ('[ -n "$(ss -Htuln sport = :%d)" ]'):format(n)))
end
-- url("http://localhost:3000/health", 200): ready when the URL answers that status (curl).
function M.url(u, status)
  status = status or 200
  if type(u) ~= "string" or u == "" then return (ready("url", nil, "url(URL, STATUS): URL must be a non-empty string, got " .. show(u))) end
  if math.type(status) ~= "integer" or status < 100 or status > 599 then
    return (ready("url", nil, "url(URL, STATUS): STATUS must be an HTTP status, got " .. show(status)))
  end
  return (ready("url", ('curl -s -o /dev/null -w "%%{http_code}" %s | grep -q "%d"'):format(quote(u), status)))
end
-- process("name"): ready when a process of that name runs (pgrep).
function M.process(name)
  if type(name) ~= "string" or name == "" then return (ready("process", nil, "process(NAME): NAME must be a non-empty string, got " .. show(name))) end
  return (ready("process", ("pgrep %s > /dev/null"):format(quote(name))))
end
-- file("/tmp/ready"): ready when the file exists.
function M.file(path)
  if type(path) ~= "string" or path == "" then return (ready("file", nil, "file(PATH): PATH must be a non-empty string, got " .. show(path))) end
  return (ready("file", ("[ -f %s ]"):format(quote(path))))
end
-- timeout(ms): ready after that long (whole seconds, at least 1).
function M.timeout(ms)
  if type(ms) ~= "number" or ms ~= ms or ms < 0 or ms == math.huge then
    return (ready("timeout", nil, "timeout(MS): MS must be a number of milliseconds, got " .. show(ms)))
  end
  return (ready("timeout", ("sleep %d"):format(math.max(1, math.floor(ms / 1000)))))
end
-- cmd("test -S /run/app.sock"): ready when the command exits 0.
function M.cmd(c)
  if type(c) ~= "string" or not c:match("%S") then return (ready("cmd", nil, "cmd(COMMAND): COMMAND must be a non-empty string, got " .. show(c))) end
  return (ready("cmd", c))
end

-- ---- the description -------------------------------------------------------------------------

local function invalid(where, fmt, ...)
  local msg = fmt:format(...)
  return nil, errors.new("TEMPLATE_INVALID", (where and (where .. ": ") or "") .. "template: " .. msg, { where = where })
end

-- template{ ... } → a description (below) | nil, err (TEMPLATE_INVALID). The description:
-- { from | image, steps = { { kind, type, args, force, src, dest, where } }, start, ready, cpu,
--   memoryMB, skipCache, context, where }
local function make(t, where, level)
  if getmetatable(t) == Desc then return t end
  if type(t) ~= "table" or getmetatable(t) ~= nil then return invalid(where, "expects a table { from, steps, start, ... }, got %s", show(t)) end
  local msg = fields.unknown(t, M.FIELDS, "template")
  if msg then return invalid(where, "%s", (msg:gsub("^template: ", ""))) end
  local d = setmetatable({ steps = {}, where = where }, Desc)
  for _, f in ipairs({ "from", "image", "context" }) do
    local v = t[f]
    if v ~= nil and (type(v) ~= "string" or v == "") then return invalid(where, "%s must be a non-empty string, got %s", f, show(v)) end
  end
  if t.from and t.image then return invalid(where, "give from (a template) or image, not both") end
  d.from, d.image, d.context = t.from, t.image, t.context
  if not d.from and not d.image then d.from = "base" end
  if t.steps ~= nil then
    if type(t.steps) ~= "table" or getmetatable(t.steps) ~= nil then return invalid(where, "steps must be a list of steps, got %s", show(t.steps)) end
    local list, named = split(t.steps)
    if not list then return invalid(where, "steps: %s (a step that is nil?)", named) end
    local k = next(named)
    if k ~= nil then return invalid(where, "steps: unexpected key %s (steps is a list)", show(k)) end
    for i, s in ipairs(list) do
      if getmetatable(s) ~= Step then
        return invalid(where, "steps[%d] must be a step (%s), got %s", i, table.concat(M.STEPS, ", "), show(s))
      end
      if s.err then return invalid(s.where or where, "steps[%d] (%s): %s", i, s.kind, s.err) end
      d.steps[i] = s
    end
  end
  local st = t.start
  if st ~= nil then
    local cmd, rd
    if type(st) == "string" then cmd = st
    elseif type(st) == "table" and getmetatable(st) == nil then
      local list, named = split(st)
      if not list then return invalid(where, "start: %s", named) end
      local m = fields.unknown(named, M.START_FIELDS, "start")
      if m then return invalid(where, "%s", m) end
      if #list ~= 1 then return invalid(where, "start expects { COMMAND, ready = CHECK }, got %d commands", #list) end
      cmd, rd = list[1], named.ready
    else
      return invalid(where, "start must be a command or { COMMAND, ready = CHECK }, got %s", show(st))
    end
    if type(cmd) ~= "string" or not cmd:match("%S") then return invalid(where, "start: the command must be a non-empty string, got %s", show(cmd)) end
    d.start = cmd
    if rd ~= nil then
      if type(rd) == "string" and rd:match("%S") then d.ready = rd
      elseif getmetatable(rd) == Ready then
        if rd.err then return invalid(rd.where or where, "start.ready: %s", rd.err) end
        d.ready, d.ready_kind = rd.cmd, rd.kind
      else
        return invalid(where, "start.ready must be a check (port, url, process, file, timeout, cmd) or a command, got %s", show(rd))
      end
    end
  end
  if t.cpu ~= nil and (math.type(t.cpu) ~= "integer" or t.cpu < 1) then return invalid(where, "cpu must be a positive integer, got %s", show(t.cpu)) end
  if t.memoryMB ~= nil and (math.type(t.memoryMB) ~= "integer" or t.memoryMB < 1) then
    return invalid(where, "memoryMB must be a positive integer, got %s", show(t.memoryMB))
  end
  if t.skipCache ~= nil and type(t.skipCache) ~= "boolean" then return invalid(where, "skipCache must be a boolean, got %s", show(t.skipCache)) end
  d.cpu, d.memoryMB, d.skipCache = t.cpu, t.memoryMB, t.skipCache == true
  return d
end

function M.template(t) return make(t, caller(2)) end

-- The step's text as logs show it: "RUN make", "COPY src /app".
function M.describe_step(s)
  local parts = { s.type }
  for _, a in ipairs(s.args) do if a ~= "" then parts[#parts + 1] = a end end
  return table.concat(parts, " ")
end

-- The globals a template file sees (its other globals are the usual ones).
local function file_env()
  local env = { template = M.template }
  for _, k in ipairs({ "run", "copy", "env", "workdir", "user", "port", "url", "process", "file", "timeout", "cmd" }) do env[k] = M[k] end
  return setmetatable(env, { __index = _G })
end

local function dirname(path)
  local d = path:match("^(.*)/[^/]*$")
  if d == nil then return "." end
  return d == "" and "/" or d
end

-- A template file: it returns template{ ... } (or the table template{} takes). Its context
-- directory (COPY's sources) is its own directory unless it names one (relative to it).
-- → description | nil, err (TEMPLATE_INVALID: syntax, run time, the description; file:line)
function M.load(path)
  if type(path) ~= "string" then error("template.load: path must be a string") end
  local chunk, lerr = loadfile(path, "t", file_env())
  if not chunk then return nil, errors.new("TEMPLATE_INVALID", lerr, { where = path }) end
  local res = table.pack(pcall(chunk))
  if not res[1] then
    local e = res[2]
    if errors.is(e) then return nil, e end
    return nil, errors.new("TEMPLATE_INVALID", tostring(e), { where = path })
  end
  local v = res[2]
  if v == nil and res.n >= 3 and errors.is(res[3]) then return nil, res[3] end
  if v == nil then return invalid(path, "the file returns nothing: end it with `return template { ... }`") end
  local d, err = make(v, path, 1)
  if not d then return nil, err end
  local base = dirname(path)
  if d.context == nil then d.context = base
  elseif d.context:sub(1, 1) ~= "/" then d.context = base .. "/" .. d.context end
  d.file = path
  return d
end

return M
