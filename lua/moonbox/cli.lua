-- moonbox.cli — the `moonbox` command line (core/main.c hands it argv; `sandboxd [OPTIONS]` and
-- `--version` are answered in C). Every command checks its input before any sandbox starts;
-- a bad input is one line on stderr and a non-zero exit (2 for a usage mistake); a Lua
-- traceback is printed only for a bug in a script (a raised string), or with --trace.
local errors = require "moonbox.errors"
local policies = require "moonbox.policies"
local S = require "moonbox.policy.schema"
local cjson = require "cjson"
local mb = require "moonbox"
local net = require "moonbox.cli.network"
local sandbox_cli = require "moonbox.cli.sandbox"
local sandboxd_cli = require "moonbox.cli.sandboxd"
local secret_cli = require "moonbox.cli.secret"
local template_cli = require "moonbox.cli.template"
local compose = require "moonbox.compose"
local core = require "moonbox.core"
local background = require "moonbox.e2b.background"
local endpoints = require "moonbox.e2b.endpoints"
local fields = require "moonbox.fields"
local text = require "moonbox.text"
local workspace = require "moonbox.workspace"

local M = {}

-- The overview (`moonbox --help`); the commands' lines come from their help (M.HELP).
local OVERVIEW = [[
usage: moonbox [--trace] SCRIPT.lua [ARGS...]
COMMANDS       moonbox --help | --version
Commands: a script runs as the main task; `run` gives it ctx from a composition; `dump-config`
prints a composition with every policy value and where it came from; `policy` explains a
policy without starting a sandbox; `sandbox` calls the sandbox API (E2B_API_KEY, E2B_DOMAIN,
or E2B_API_URL + E2B_SANDBOX_URL name the endpoint; with none of them, the background sandboxd);
`secret` keeps values in that endpoint's secret store for the network policy's rules (a value
comes from stdin, a file or --prompt, never from argv, and is never shown); `template` builds
a template described in Lua (E2B's template API) and lists or deletes templates; `sync` copies a host
directory into the composition's world and brings back what changed there (`diff`: what `pull`
would do); `sandboxd start|stop|status` manage the per-user background sandboxd (the first
sandbox, secret, template or sync command without an endpoint starts it); `sandboxd [OPTIONS...]` is the
local E2B-compatible server in the foreground.
CONCERN is env, lifecycle, timeouts, composition or network; FILE a policy file merged over
the shipped defaults (and over the composition's own policies).
NETWORK_HELP
Each command prints its own usage with --help (moonbox sandbox create --help); a usage mistake
is one line on stderr and exit status 2.
]]

-- The order of the overview's lines.
local OVERVIEW_PATHS = { "run", "dump-config", "policy env", "policy timeouts", "policy check", "policy network",
  "sync push", "sync pull", "sync diff", "sandboxd" }

-- A usage mistake: one line naming what was wrong and where the command's usage is, exit
-- status 2. The command in use (M.in_command) names the --help to point at.
local Usage, HelpReq = {}, {}
local current                                    -- "sandbox create", "policy", ... | nil (top level)
function M.in_command(path) current = path end
local function usage_error(fmt, ...)
  error(setmetatable({ message = fmt:format(...), cmd = current }, Usage), 0)
end

local function out(s) io.stdout:write(s) end
M.usage_error = usage_error

-- A printer of one table's rows, each cut to the terminal's width (measured once per table).
function M.rows()
  local w = M.width()
  return function(s) io.stdout:write(text.fit(s, w), "\n") end
end

-- The terminal's width when stdout is one ($COLUMNS wins), else nil: tables are cut to it.
function M.width()
  local c = math.tointeger(tonumber(os.getenv("COLUMNS") or ""))
  if c and c > 0 then return c end
  if not core.isatty(1) then return nil end
  local _, cols = core.tty_size(1)
  return cols and cols > 0 and cols or nil
end

-- delete(ref) for each ref in turn, as `kill`, `snapshot delete` and `secret delete` do:
-- true → prints done(ref); false → E2B_NOT_FOUND "<what> <ref> not found"; nil, err → err.
-- → 0 | nil, err (the first refusal; the refs before it are done)
function M.delete_each(refs, delete, what, done)
  for _, ref in ipairs(refs) do
    local ok, err = delete(ref)
    if ok == nil then return nil, err end
    if not ok then return nil, errors.new("E2B_NOT_FOUND", ("%s %s not found"):format(what, ref)) end
    io.stdout:write(done(ref), "\n")
  end
  return 0
end

------------------------------------------------------------------------------------------------
-- --help: every command's own usage. M.HELP[path] = { usage = { first line, continuation... },
-- about = one line, args = { { NAME, text } }, options = { { "--flag V", text } }, notes = text }
-- or, for a group (`moonbox sandbox`), { about, commands = { sub... } }.
M.HELP = {}

local function usage_lines(path, h, indent)
  local lines = {}
  for k, l in ipairs(h.usage) do
    lines[k] = k == 1 and (indent .. l) or ((" "):rep(#indent + #("moonbox " .. path .. " ")) .. l)
  end
  return table.concat(lines, "\n")
end

-- The lines a command adds to the overview (`moonbox --help`).
function M.overview_lines(paths)
  local t = {}
  for _, p in ipairs(paths) do
    local h = M.HELP[p]
    if h and h.usage then t[#t + 1] = usage_lines(p, h, "       ") .. "\n" end
  end
  return table.concat(t)
end

local function columns(rows)
  local w = 0
  for _, r in ipairs(rows) do w = math.max(w, #r[1]) end
  local t = {}
  for _, r in ipairs(rows) do t[#t + 1] = ("  %-" .. w .. "s  %s\n"):format(r[1], r[2]) end
  return table.concat(t)
end

function M.help_text(path)
  local h = M.HELP[path]
  if not h then return nil end
  local t = {}
  if h.commands then
    t[#t + 1] = ("usage: moonbox %s COMMAND [ARGS...]\n\n%s\n\nCommands:\n"):format(path, h.about)
    local rows = {}
    for _, sub in ipairs(h.commands) do
      local sh = M.HELP[path .. " " .. sub]
      rows[#rows + 1] = { sub, sh and sh.about or "" }
    end
    t[#t + 1] = columns(rows)
    t[#t + 1] = ("\nrun 'moonbox %s COMMAND --help' for a command's usage\n"):format(path)
    if h.notes then t[#t + 1] = "\n" .. h.notes .. (h.notes:sub(-1) == "\n" and "" or "\n") end
    return table.concat(t)
  end
  t[#t + 1] = usage_lines(path, h, "usage: ") .. "\n\n" .. h.about .. "\n"
  if h.args and #h.args > 0 then t[#t + 1] = "\nArguments:\n" .. columns(h.args) end
  local opts = {}
  for _, o in ipairs(h.options or {}) do opts[#opts + 1] = o end
  opts[#opts + 1] = { "-h, --help", "print this help and exit" }
  t[#t + 1] = "\nOptions:\n" .. columns(opts)
  if h.notes then t[#t + 1] = "\n" .. h.notes .. (h.notes:sub(-1) == "\n" and "" or "\n") end
  return table.concat(t)
end

-- Raised by `--help` / `-h`: the command's help on stdout, exit 0.
local function help_request(path) error(setmetatable({ cmd = path }, HelpReq), 0) end
M.help_request = help_request
local function is_help(a) return a == "--help" or a == "-h" end
M.is_help = is_help

-- An unknown subcommand of group `path` (names: the valid ones): the nearest one when it looks
-- like a typo, else the list.
function M.unknown_subcommand(path, sub, names)
  local near = fields.nearest(sub, names)
  if near then usage_error("%s: unknown subcommand %s (did you mean %s?)", path, sub, near) end
  local list = table.concat(names, ", ", 1, #names - 1) .. " or " .. names[#names]
  usage_error("%s: unknown subcommand %s (expected %s)", path, sub, list)
end

-- A group's subcommand (argv[i]): → the name, or a usage error / its help.
function M.subcommand(path, argv, i, names)
  M.in_command(path)
  local sub = argv[i]
  if sub == nil then
    usage_error("%s: which command? (%s)", path, table.concat(names, ", "))
  end
  if is_help(sub) or sub == "help" then help_request(path) end
  for _, n in ipairs(names) do
    if n == sub then M.in_command(path .. " " .. sub) return sub end
  end
  M.unknown_subcommand(path, sub, names)
end

local function option_names(spec)
  local names = {}
  for k in pairs(spec) do names[#names + 1] = k end
  table.sort(names)
  return names
end

-- Parses options from argv[i..] until the first positional argument (or `--`); `--help` / `-h`
-- among them asks for `command`'s help. spec: option → "flag" | "value" | "list".
-- → opts, index of the first positional
local function parse(argv, i, spec, command)
  local opts = {}
  while i <= #argv do
    local a = argv[i]
    if a == "--" then return opts, i + 1 end
    if a:sub(1, 1) ~= "-" or a == "-" then break end
    if is_help(a) then help_request(command) end
    local name, inline = a:match("^(%-%-[%w%-]+)=(.*)$")
    name = name or a
    local kind = spec[name]
    if not kind then
      local near = name:sub(1, 2) == "--" and fields.nearest(name, option_names(spec))
      usage_error("%s: unknown option %s%s", command, name, near and (" (did you mean " .. near .. "?)") or "")
    end
    if kind == "flag" then
      if inline then usage_error("%s: option %s takes no value", command, name) end
      opts[name] = true
      i = i + 1
    else
      local v = inline
      if v == nil then
        v = argv[i + 1]
        if v == nil then usage_error("%s: option %s needs a value", command, name) end
        i = i + 2
      else
        i = i + 1
      end
      if kind == "list" then
        opts[name] = opts[name] or {}
        table.insert(opts[name], v)
      else
        if opts[name] ~= nil then usage_error("%s: option %s given twice", command, name) end
        opts[name] = v
      end
    end
  end
  return opts, i
end

M.parse = parse

local POLICY_OPT = { "--policy CONCERN=FILE", "a policy file merged over the defaults (repeatable; CONCERN: env, lifecycle, timeouts, composition or network)" }
local COMPOSE_OPT = { "--compose C", "the composition whose policies apply (with --policy over them)" }
M.HELP["run"] = { usage = { "moonbox run [--trace] [--policy CONCERN=FILE]... [--background-sandboxd] COMPOSE.lua SCRIPT.lua [ARGS...]" },
  about = "Run SCRIPT.lua as the main task with ctx from the composition COMPOSE.lua.",
  args = { { "COMPOSE.lua", "the composition (plugins, policies)" }, { "SCRIPT.lua", "the script; ARGS are its arg[1..]" } },
  options = { { "--trace", "print where an operational error was raised" }, POLICY_OPT,
    { "--background-sandboxd", "with no E2B variable set, use the background sandboxd (moonbox sandboxd; started if needed) "
      .. "instead of a sandboxd embedded for this run" } } }
M.HELP["dump-config"] = { usage = { "moonbox dump-config [--policy CONCERN=FILE]... COMPOSE.lua" },
  about = "Print a composition with every policy value and where it came from.",
  args = { { "COMPOSE.lua", "the composition" } }, options = { POLICY_OPT } }
M.HELP["policy"] = { about = "Explain a policy without starting a sandbox.",
  commands = { "env", "timeouts", "check", "network" } }
M.HELP["policy env"] = { usage = { "moonbox policy env [--compose C] [--policy CONCERN=FILE]... [--env-file F | --from-host]",
    "[--set NAME=VALUE]... [--unset NAME]... [--json]" },
  about = "Say what the env policy does to each name, which rule decides, and the environment a spawn gets.",
  options = { COMPOSE_OPT, POLICY_OPT, { "--env-file F", "the ambient environment: NAME=VALUE lines or NUL-separated entries" },
    { "--from-host", "the ambient environment: this process's" }, { "--set NAME=VALUE", "an explicit entry (repeatable)" },
    { "--unset NAME", "an explicit deletion (repeatable)" }, { "--json", "print JSON" } } }
M.HELP["policy timeouts"] = { usage = { "moonbox policy timeouts [--compose C] [--policy CONCERN=FILE]... [--json]" },
  about = "Print every clock (lease, renewal, request, stream idle, ...) with what set it.",
  options = { COMPOSE_OPT, POLICY_OPT, { "--json", "print JSON" } } }
M.HELP["policy check"] = { usage = { "moonbox policy check [--compose C] [--policy CONCERN=FILE]... [CONCERN=]FILE" },
  about = "Validate a policy file and print what it changes.",
  args = { { "[CONCERN=]FILE", "the policy file (its concern from its name when not given)" } },
  options = { COMPOSE_OPT, POLICY_OPT } }
M.HELP["sync"] = { about = "Copy a host directory into a composition's world and bring back what changed there.",
  commands = { "push", "pull", "diff" } }
local SYNC_OPTS = { { "--compose C", "the composition whose world to sync with (required)" }, POLICY_OPT,
  { "--exclude PATTERN", "leave matching paths out (repeatable)" }, { "--gitignore", "leave out what .gitignore files ignore" },
  { "--max-files N", "refuse more than N files" }, { "--max-bytes N", "refuse more than N bytes" }, { "--json", "print the report as JSON" } }
M.HELP["sync push"] = { usage = { "moonbox sync push --compose C [--exclude PATTERN]... [--gitignore] [--max-files N]",
    "[--max-bytes N] [--json] HOSTDIR WORLDDIR" },
  about = "Copy HOSTDIR into the world's WORLDDIR.",
  args = { { "HOSTDIR", "the directory on this host" }, { "WORLDDIR", "where it goes in the world" } }, options = SYNC_OPTS }
local PULL_OPTS = { { "--prefer sandbox|host", "how a conflict is resolved (default: not applied, exit 3)" } }
for _, o in ipairs(SYNC_OPTS) do PULL_OPTS[#PULL_OPTS + 1] = o end
M.HELP["sync pull"] = { usage = { "moonbox sync pull --compose C [--prefer sandbox|host] [--exclude PATTERN]...",
    "[--gitignore] [--max-files N] [--max-bytes N] [--json] WORLDDIR HOSTDIR" },
  about = "Bring back into HOSTDIR what changed in the world's WORLDDIR since the push (exit 3: conflicts left).",
  args = { { "WORLDDIR", "the directory in the world" }, { "HOSTDIR", "the directory on this host" } }, options = PULL_OPTS }
M.HELP["sync diff"] = { usage = { "moonbox sync diff --compose C [--prefer sandbox|host] [--exclude PATTERN]...",
    "[--gitignore] [--max-files N] [--max-bytes N] [--json] WORLDDIR HOSTDIR" },
  about = "Print what `sync pull` would do, without doing it.",
  args = M.HELP["sync pull"].args, options = PULL_OPTS }

-- Every command of a module (sandbox, secret, policy network): its help, its overview lines.
local MODULE_PATHS = {}
for _, cmds in ipairs({ net, sandbox_cli, secret_cli, template_cli, sandboxd_cli }) do
  for _, e in ipairs(cmds.COMMAND_HELP) do
    M.HELP[e.path] = e
    if e.usage then MODULE_PATHS[#MODULE_PATHS + 1] = e.path end
  end
end

function M.overview()
  local paths = {}
  for _, p in ipairs(OVERVIEW_PATHS) do
    if p == "sandboxd" then
      for _, q in ipairs(MODULE_PATHS) do if not q:match("^policy ") and q ~= p then paths[#paths + 1] = q end end
    end
    paths[#paths + 1] = p
  end
  local lines = M.overview_lines(paths):gsub("^%s+", "")
  local text = OVERVIEW:gsub("COMMANDS", "       " .. lines:gsub("%%", "%%%%"))
  return (text:gsub("NETWORK_HELP\n", (net.HELP:gsub("%%", "%%%%"))))
end

-- --policy CONCERN=FILE... → { concern → path } (a concern given twice: the last wins)
local function policy_files(list)
  local files = {}
  for _, v in ipairs(list or {}) do
    local c, path = policies.parse_arg(v)
    if not c then usage_error("--policy %s", path) end
    files[c] = path
  end
  return files
end

local function readable(path, what)
  local f, err = io.open(path, "rb")
  if not f then return nil, errors.new("MB_NOT_FOUND", ("%s %s: %s"):format(what, path, (tostring(err):gsub("^[^:]*: ", "")))) end
  local ok, rerr = f:read(0)
  f:close()
  if ok == nil and rerr then return nil, errors.new("MB_NOT_FOUND", ("%s %s: %s"):format(what, path, rerr)) end
  return true
end

-- The policy set the policy commands look at: the composition's (with --policy over it), or
-- the defaults with --policy. → set, comp | nil, err
local function policy_set(opts)
  local files = policy_files(opts["--policy"])
  if opts["--compose"] then
    local ok, err = readable(opts["--compose"], "composition")
    if not ok then return nil, err end
    local comp, cerr = compose.load(opts["--compose"], { policy_files = files })
    if not comp then return nil, cerr end
    return comp.policies, comp
  end
  local layers = {}
  for _, c in ipairs(policies.CONCERNS) do
    if files[c] then layers[#layers + 1] = { files = { [c] = files[c] }, via = ("--policy %s=%s"):format(c, files[c]) } end
  end
  return policies.load(layers)
end

M.policy_set = policy_set

local function json() return cjson.new() end

-- "--set NAME=VALUE" ... → explicit table, where(name)
local function explicit_entries(opts)
  local explicit, from = {}, {}
  for _, v in ipairs(opts["--set"] or {}) do
    local name, value = v:match("^([^=]*)=(.*)$")
    if not name then usage_error("--set %s: expected NAME=VALUE (use --unset NAME to delete a name)", v) end
    explicit[name], from[name] = value, "--set " .. v
  end
  for _, name in ipairs(opts["--unset"] or {}) do explicit[name], from[name] = false, "--unset " .. name end
  return explicit, function(name) return from[name] end
end

-- NAME=VALUE lines ('#' comments and blank lines skipped), or NUL-separated entries (env -0,
-- /proc/PID/environ). → table | nil, err
local function read_env(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, errors.new("MB_NOT_FOUND", ("--env-file %s: %s"):format(path, (tostring(err):gsub("^[^:]*: ", "")))) end
  local text = f:read("a")
  f:close()
  if not text then return nil, errors.new("MB_NOT_FOUND", ("--env-file %s: cannot read it"):format(path)) end
  local env = {}
  if text:find("\0", 1, true) then
    for entry in text:gmatch("([^%z]*)%z") do
      local k, v = entry:match("^([^=]+)=(.*)$")
      if k then env[k] = v end
    end
    return env
  end
  local n = 0
  for line in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do
    n = n + 1
    if line:match("%S") and not line:match("^%s*#") then
      local k, v = line:match("^([^=]+)=(.*)$")
      if not k then
        return nil, errors.new("POLICY_INVALID", ("%s:%d: expected NAME=VALUE, got %q"):format(path, n, line))
      end
      env[k] = v
    end
  end
  return env
end

local function verdict_text(e)
  local function rule(r) return ("%s (%s)"):format(r.rule, r.where or "?") end
  if e.verdict == "kept" and not e.rule then return "no rule matched" end
  if e.verdict == "kept" or e.verdict == "dropped" then
    local t = "by " .. rule(e)
    if e.over then t = t .. ", over " .. rule(e.over) end
    return t
  end
  local t = ("%s (%s)"):format(e.rule, e.where)
  if not e.was then return t .. "; not in the ambient environment" end
  if e.was.verdict == "dropped" then return t .. "; the ambient value was dropped by " .. rule(e.was) end
  return t .. "; the ambient value was kept"
end

local function layers_text(set)
  local parts = { "defaults" }
  for _, l in ipairs(set.layers) do
    if l.dir then parts[#parts + 1] = policies.shown(l.dir) .. "/ (" .. tostring(l.via) .. ")"
    elseif l.files then
      for _, c in ipairs(policies.CONCERNS) do
        if l.files[c] then parts[#parts + 1] = ("%s=%s (%s)"):format(c, policies.shown(l.files[c]), tostring(l.via)) end
      end
    elseif l.values then parts[#parts + 1] = tostring(l.via) end
  end
  return table.concat(parts, " + ")
end

M.layers_text = layers_text

local function policy_env(argv, i)
  local opts, pos = parse(argv, i, { ["--compose"] = "value", ["--policy"] = "list", ["--env-file"] = "value",
    ["--from-host"] = "flag", ["--set"] = "list", ["--unset"] = "list", ["--json"] = "flag" }, "policy env")
  if argv[pos] then usage_error("policy env: unexpected argument %s", argv[pos]) end
  if opts["--env-file"] and opts["--from-host"] then usage_error("policy env: give --env-file or --from-host, not both") end
  local explicit, from = explicit_entries(opts)
  local set, err = policy_set(opts)
  if not set then return nil, err end
  local ambient = {}
  if opts["--env-file"] then ambient, err = read_env(opts["--env-file"])
  elseif opts["--from-host"] then ambient, err = read_env("/proc/self/environ") end
  if not ambient then return nil, err end
  local r, rerr = policies.explain_env(set, ambient, explicit, { explicit_where = from })
  if not r then return nil, rerr end
  if opts["--json"] then
    local cj = json()
    local items = {}
    for _, e in ipairs(r.entries) do
      items[#items + 1] = cj.encode({ name = e.name, verdict = e.verdict, rule = e.rule, where = e.where,
        over = e.over and { rule = e.over.rule, where = e.over.where } or nil,
        was = e.was and { verdict = e.was.verdict, rule = e.was.rule, where = e.was.where } or nil })
    end
    local env = {}
    for k, v in pairs(r.env) do env[#env + 1] = cj.encode(k) .. ":" .. cj.encode(v) end
    table.sort(env)
    out(('{"policy":%s,"entries":[%s],"env":{%s}}\n'):format(cj.encode(layers_text(set)), table.concat(items, ","),
      table.concat(env, ",")))
    return 0
  end
  out("env policy: " .. layers_text(set) .. "\n")
  if not (opts["--env-file"] or opts["--from-host"]) then
    out("no ambient environment given (--env-file F or --from-host): only explicit entries are shown\n")
  end
  local w = 4
  for _, e in ipairs(r.entries) do if #e.name > w then w = #e.name end end
  w = math.min(w, 40)
  for _, e in ipairs(r.entries) do
    out(("%-" .. w .. "s  %-10s  %s\n"):format(e.name, e.verdict, verdict_text(e)))
  end
  local names = {}
  for k in pairs(r.env) do names[#names + 1] = k end
  table.sort(names)
  out(("\nthe environment a spawn gets (%d name%s):\n"):format(#names, #names == 1 and "" or "s"))
  for _, k in ipairs(names) do out(("  %s=%s\n"):format(k, r.env[k])) end
  return 0
end

local function ms_text(ms)
  if ms == nil then return "-" end
  if ms == math.floor(ms) then return ("%d ms"):format(ms) end
  return ("%.1f ms"):format(ms)
end

local function policy_timeouts(argv, i)
  local spec = { ["--compose"] = "value", ["--policy"] = "list", ["--json"] = "flag" }
  local opts, pos = parse(argv, i, spec, "policy timeouts")
  if argv[pos] then usage_error("policy timeouts: unexpected argument %s", argv[pos]) end
  local set, comp = policy_set(opts)
  if not set then return nil, comp end
  local e2b
  if comp then
    for _, rec in ipairs(comp.plugins) do
      if rec.name == "e2b" and rec.given.timeoutMs ~= nil then e2b = { timeoutMs = rec.config.timeoutMs, where = rec.where } end
    end
  end
  local clocks = policies.clocks(set, e2b)
  if opts["--json"] then
    local cj = json()
    local items = {}
    for _, c in ipairs(clocks) do items[#items + 1] = cj.encode({ name = c.name, ms = c.ms, text = c.text, where = c.where }) end

    out(("[%s]\n"):format(table.concat(items, ",")))
    return 0
  end
  out("policies: " .. layers_text(set) .. "\n")
  for _, c in ipairs(clocks) do
    out(("%-19s %10s  %s%s\n"):format(c.name, ms_text(c.ms), c.text, c.where and ("  [" .. c.where .. "]") or ""))
  end
  return 0
end

local function policy_check(argv, i)
  local spec = { ["--compose"] = "value", ["--policy"] = "list" }
  local opts, pos = parse(argv, i, spec, "policy check")
  local target = argv[pos]
  if not target then usage_error("policy check: which file? (moonbox policy check [CONCERN=]FILE)") end
  if argv[pos + 1] then usage_error("policy check: unexpected argument %s", argv[pos + 1]) end
  local concern, path = target:match("^(%a+)=(.+)$")
  if concern and not policies.is_concern(concern) then
    usage_error("policy check %s: unknown concern %q (expected %s)", target, concern, policies.concern_list())
  end
  path = path or target
  local ok, rerr = readable(path, "policy file")
  if not ok then return nil, rerr end
  local base = {}
  if opts["--compose"] then
    local set, comp = policy_set(opts)
    if not set then return nil, comp end
    base = set.layers
  else
    local files = policy_files(opts["--policy"])
    for _, c in ipairs(policies.CONCERNS) do
      if files[c] then base[#base + 1] = { files = { [c] = files[c] }, via = ("--policy %s=%s"):format(c, files[c]) } end
    end
  end
  local r, err = policies.check(path, concern, base)
  if not r then return nil, err end
  out(("%s: a valid %s policy; against %s:\n"):format(path, r.concern,
    #base > 0 and "the defaults and the given policies" or "the defaults"))
  for _, c in ipairs(r.changes) do
    if c.same then
      out(("  %s = %s (the same as before)  [%s]\n"):format(c.field, S.format(c.to), c.where))
    else
      out(("  %s: %s -> %s  [%s]\n"):format(c.field, S.format(c.from), S.format(c.to), c.where))
    end
  end
  out(("%d field%s set, %d left as %s\n"):format(r.set_fields, r.set_fields == 1 and "" or "s", r.unchanged,
    #base > 0 and "they were" or "the defaults"))
  return 0
end

local function dump_config(argv, i)
  local opts, pos = parse(argv, i, { ["--policy"] = "list" }, "dump-config")
  local file = argv[pos]
  if not file or argv[pos + 1] then usage_error("dump-config: expected one COMPOSE.lua") end
  local files = policy_files(opts["--policy"])
  local ok, err = readable(file, "composition")
  if not ok then return nil, err end
  local comp, cerr = compose.load(file, { policy_files = files })
  if not comp then return nil, cerr end
  out(compose.describe(comp))
  return 0
end

-- `arg` as a stock lua5.4 gives it: the script at 0, its arguments from 1, and what came before
-- the script (the program, then moonbox's own words) at negative indices.
local function set_arg(argv, at)
  local argt = { [-at] = core.exe_path() or "moonbox" }
  for k = 1, #argv do argt[k - at] = argv[k] end
  _G.arg = argt
end

-- With no E2B variable set, a composition with the e2b plugin uses the per-user background
-- sandboxd (started now if it does not run) instead of an embedded one: `moonbox sync` always
-- (a sandbox made by `moonbox sandbox create` lives there), `moonbox run --background-sandboxd`
-- when asked. → true | nil, err
local function background_endpoints(comp)
  local uses_e2b = false
  for _, rec in ipairs(comp.plugins) do
    if rec.name == "e2b" and rec.config.apiKey == nil then uses_e2b = true end
  end
  if not uses_e2b or not endpoints.resolve({}).local_sandboxd then return true end
  local res = table.pack(mb.run(function()
    return background.ensure_endpoints{ timeouts = comp.policies.timeouts }
  end))
  if not res[1] then return nil, res[2] end
  comp.e2b_endpoints = res[1]
  return true
end

local function run_composition(argv, i, ctl)
  local opts, pos = parse(argv, i, { ["--policy"] = "list", ["--trace"] = "flag", ["--background-sandboxd"] = "flag" }, "run")
  ctl.trace = ctl.trace or opts["--trace"]
  local file, script = argv[pos], argv[pos + 1]
  if not file or not script then usage_error("run: expected COMPOSE.lua SCRIPT.lua [ARGS...]") end
  local files = policy_files(opts["--policy"])
  local ok, err = readable(file, "composition")
  if not ok then return nil, err end
  ok, err = readable(script, "script")
  if not ok then return nil, err end
  local comp, cerr = compose.load(file, { policy_files = files })
  if not comp then return nil, cerr end
  local chunk, lerr = loadfile(script, "t")
  if not chunk then return nil, errors.new("MB_SCRIPT", lerr) end
  if opts["--background-sandboxd"] then
    local bok, berr = background_endpoints(comp)
    if not bok then return nil, berr end
  end
  local args = table.move(argv, pos + 2, #argv, 1, {})
  set_arg(argv, pos + 1)
  local res = table.pack(compose.run(comp, script, table.unpack(args)))
  if math.type(res[1]) == "integer" then return res[1] end
  if res[1] == nil and res.n >= 2 and res[2] ~= nil then return nil, res[2] end
  return 0
end

local function run_script(argv, i)
  local script = argv[i]
  local ok, err = readable(script, "script")
  if not ok then return nil, err end
  local chunk, lerr = loadfile(script, "t")
  if not chunk then return nil, errors.new("MB_SCRIPT", lerr) end
  local args = table.move(argv, i + 1, #argv, 1, {})
  set_arg(argv, i)
  local res = table.pack(mb.run(chunk, table.unpack(args)))
  if math.type(res[1]) == "integer" then return res[1] end
  return 0
end

------------------------------------------------------------------------------------------------
-- moonbox sync push|pull|diff

local function mib(n) return ("%.1f MiB"):format(n / 1048576) end

-- The progress of a sync on stderr: a bar redrawn in place on a terminal, a line per phase
-- otherwise (and nothing with --json unless stderr is a terminal).
local function progress_printer(verb, tty, quiet)
  local last_phase, last_draw = nil, 0
  local words = { scan = "scanned", upload = "uploading", unpack = "unpacking in the world", manifest = "hashing in the world",
    fetch = "fetching", apply = "applying" }
  local p = {}
  function p.update(e)
    if e.phase == "done" then return end
    if tty then
      local now = mb.now()
      if e.phase == last_phase and now - last_draw < 80 then return end
      last_phase, last_draw = e.phase, now
      local frac = e.totalBytes and e.totalBytes > 0 and (e.bytes or 0) / e.totalBytes
        or e.totalFiles and e.totalFiles > 0 and (e.files or 0) / e.totalFiles or nil
      local bar = ""
      if frac then
        local w = 24
        local k = math.floor(math.min(frac, 1) * w + 0.5)
        bar = ("[%s%s] %3d%%  "):format(("#"):rep(k), ("."):rep(w - k), math.floor(math.min(frac, 1) * 100))
      end
      local bytes = e.bytes and (e.totalBytes and ("%s/%s  "):format(mib(e.bytes), mib(e.totalBytes)) or (mib(e.bytes) .. "  ")) or ""
      local files = e.files and (e.totalFiles and ("%d/%d files"):format(e.files, e.totalFiles) or ("%d files"):format(e.files)) or ""
      io.stderr:write(("\r\27[K%s %-22s %s%s%s"):format(verb, words[e.phase] or e.phase, bar, bytes, files))
      io.stderr:flush()
    elseif not quiet and e.phase ~= last_phase then
      last_phase = e.phase
      local what = words[e.phase] or e.phase
      if e.phase == "scan" then what = ("scanned %d files, %s"):format(e.totalFiles or 0, mib(e.totalBytes or 0)) end
      io.stderr:write(("%s: %s\n"):format(verb, what))
    end
  end
  function p.finish() if tty and last_phase then io.stderr:write("\r\27[K") io.stderr:flush() end end
  return p
end

local function sync_command(argv, i)
  local sub = M.subcommand("sync", argv, i, M.HELP["sync"].commands)
  local spec = { ["--compose"] = "value", ["--policy"] = "list", ["--exclude"] = "list", ["--gitignore"] = "flag",
    ["--max-files"] = "value", ["--max-bytes"] = "value", ["--json"] = "flag" }
  if sub ~= "push" then spec["--prefer"] = "value" end
  local opts, pos = parse(argv, i + 1, spec, "sync " .. sub)
  local a, b = argv[pos], argv[pos + 1]
  if not a or not b or argv[pos + 2] then
    usage_error(sub == "push" and "sync push: expected HOSTDIR WORLDDIR" or ("sync %s: expected WORLDDIR HOSTDIR"):format(sub))
  end
  if not opts["--compose"] then usage_error("sync %s: --compose C is required (the world to sync with)", sub) end
  local prefer = opts["--prefer"]
  if prefer and prefer ~= "sandbox" and prefer ~= "host" then usage_error("sync %s: --prefer must be sandbox or host", sub) end
  local limits = {}
  for _, o in ipairs({ { "--max-files", "maxFiles" }, { "--max-bytes", "maxBytes" } }) do
    local v = opts[o[1]]
    if v then
      local n = math.tointeger(tonumber(v))
      if not n or n < 1 then usage_error("sync %s: %s must be a positive integer", sub, o[1]) end
      limits[o[2]] = n
    end
  end
  local ok, err = readable(opts["--compose"], "composition")
  if not ok then return nil, err end
  local comp, cerr = compose.load(opts["--compose"], { policy_files = policy_files(opts["--policy"]) })
  if not comp then return nil, cerr end
  ok, err = background_endpoints(comp)
  if not ok then return nil, err end
  local json = opts["--json"]
  local tty = core.isatty(2)
  local pr = progress_printer(sub, tty, json)
  local req = { from = a, to = b, exclude = opts["--exclude"], gitignore = opts["--gitignore"] or nil, prefer = prefer,
    maxFiles = limits.maxFiles, maxBytes = limits.maxBytes, onProgress = pr.update }
  local t0
  local res = table.pack(compose.run(comp, function(ctx)
    local ws = ctx.workspace
    if not ws then
      if not ctx.fs then
        return nil, errors.new("COMPOSE_INVALID", opts["--compose"] .. ": sync needs an fs provider (plugin fs or fs-local)")
      end
      local config = {}
      for k, f in pairs(workspace.schema) do
        local d = f.default
        if type(d) == "function" then d = d() end
        config[k] = d
      end
      ws = workspace.new(ctx, config)
    end
    t0 = mb.now()
    local r, e = ws[sub](ws, req)
    pr.finish()
    if not r then return nil, e end
    return r, mb.now() - t0
  end))
  if math.type(res[1]) == "integer" then return res[1] end     -- a signal ended it
  if res[1] == nil then return nil, res[2] end
  local r, ms = res[1], res[2]
  if json then
    -- lua-cjson writes an empty table as {}: the report's lists are written as arrays here
    local cj = cjson.new()
    local keys = {}
    for k in pairs(r) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do
      local v = r[k]
      local enc
      if type(v) == "table" then
        local items = {}
        for n, x in ipairs(v) do items[n] = cj.encode(x) end
        enc = "[" .. table.concat(items, ",") .. "]"
      else
        enc = cj.encode(v)
      end
      parts[#parts + 1] = cj.encode(k) .. ":" .. enc
    end
    parts[#parts + 1] = '"seconds":' .. ("%.3f"):format(ms / 1000)
    out("{" .. table.concat(parts, ",") .. "}\n")
    if sub == "pull" then
      for _, c in ipairs(r.conflicts) do if not c.resolution then return 3 end end
    end
  elseif sub == "push" then
    out(("pushed %s to %s: %d files, %d directories, %d links, %s (archive %s), %d excluded, in %.2f s\n"):format(
      r.from, r.to, r.files, r.dirs, r.symlinks, mib(r.bytes), mib(r.archiveBytes), r.excluded, ms / 1000))
  else
    for _, k in ipairs({ { "added", "A" }, { "modified", "M" }, { "deleted", "D" }, { "modeChanged", "m" } }) do
      for _, p in ipairs(r[k[1]]) do out(("%s %s\n"):format(k[2], p)) end
    end
    local open = 0
    for _, c in ipairs(r.conflicts) do
      local how = c.resolution == "sandbox" and "taken from the world" or c.resolution == "host" and "host kept"
        or (sub == "diff" and "would not be applied" or "not applied")
      if not c.resolution then open = open + 1 end
      out(("C %s: %s (%s)\n"):format(c.path, c.reason, how))
    end
    local verb = sub == "diff" and "would pull" or "pulled"
    out(("%s %d added, %d modified, %d deleted, %d mode changes from %s into %s; %d conflict%s%s, in %.2f s\n"):format(
      verb, #r.added, #r.modified, #r.deleted, #r.modeChanged, r.from, r.to, #r.conflicts, #r.conflicts == 1 and "" or "s",
      open > 0 and " (use --prefer sandbox|host to resolve)" or "", ms / 1000))
    if sub == "pull" and open > 0 then return 3 end
  end
  return 0
end

-- A raised value → what to print. Strings (bugs) keep their traceback; moonbox errors are one
-- line unless tracing.
local function report(e, trace)
  if getmetatable(e) == HelpReq then
    out(M.help_text(e.cmd) or M.overview())
    return 0
  end
  if getmetatable(e) == Usage then
    io.stderr:write("moonbox: ", e.message, ("; run 'moonbox %s--help' for usage\n"):format(e.cmd and (e.cmd .. " ") or ""))
    return 2
  end
  if errors.is(e) then
    io.stderr:write("moonbox: ", tostring(e), "\n")
    if trace and e.traceback then io.stderr:write(e.traceback, "\n") end
    return 1
  end
  io.stderr:write("moonbox: ", tostring(e), "\n")
  return 1
end

local function handler(e)
  if type(e) == "string" and not e:find("\nstack traceback:", 1, true) then return debug.traceback(e, 2) end
  return e
end

-- argv: the program's arguments (argv[1] is the first after the program name). opts.lua_dir:
-- where the Lua modules were found (for --help). → exit status
function M.main(argv, opts)
  opts = opts or {}
  local ctl = {}
  M.in_command(nil)
  local ok, a, b = xpcall(function()
    local i = 1
    while argv[i] == "--trace" do ctl.trace = true; i = i + 1 end
    local cmd = argv[i]
    if cmd == nil then usage_error("no command given (a SCRIPT.lua, or run, dump-config, policy, sync, sandbox, secret, template, sandboxd)") end
    if cmd == "-h" or cmd == "--help" or cmd == "help" then
      out(M.overview())
      out(("Lua modules: %s (MOONBOX_HOME: a checkout or an install prefix to use instead)\n"):format(opts.lua_dir or
        (package.searchpath("moonbox", package.path) or "?"):gsub("/moonbox/init%.lua$", "")))
      return 0
    end
    if cmd == "--version" then
      out(("moonbox %s\n"):format(core.version or "?"))
      return 0
    end
    if cmd == "run" or cmd == "sync" or cmd == "dump-config" then M.in_command(cmd) end
    if cmd == "run" then return run_composition(argv, i + 1, ctl) end
    if cmd == "sync" then return sync_command(argv, i + 1) end
    if cmd == "dump-config" then return dump_config(argv, i + 1) end
    if cmd == "policy" then
      local sub = M.subcommand("policy", argv, i + 1, M.HELP["policy"].commands)
      if sub == "env" then return policy_env(argv, i + 2) end
      if sub == "timeouts" then return policy_timeouts(argv, i + 2) end
      if sub == "check" then return policy_check(argv, i + 2) end
      return net.main(M, argv, i + 2)
    end
    if cmd == "sandbox" then return sandbox_cli.main(M, argv, i + 1) end
    if cmd == "secret" then return secret_cli.main(M, argv, i + 1) end
    if cmd == "template" then return template_cli.main(M, argv, i + 1) end
    if cmd == "sandboxd" then return sandboxd_cli.main(M, argv, i + 1) end
    if cmd:sub(1, 1) == "-" then usage_error("unknown option %s", cmd) end
    return run_script(argv, i)
  end, handler)
  if not ok then return report(a, ctl.trace) end
  if a == nil then return report(b, ctl.trace) end
  return a
end

return M
