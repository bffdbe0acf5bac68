-- moonbox.cli.sandbox — `moonbox sandbox create|list|info|kill|pause|resume|snapshot|host|metrics|logs|network|exec|connect`:
-- the sandbox API (moonbox.e2b.client) from the shell, against the endpoint E2B's variables
-- name (E2B_API_KEY, E2B_DOMAIN, or E2B_API_URL + E2B_SANDBOX_URL for a sandboxd), or with none
-- of them the per-user background sandboxd (moonbox.e2b.background, started if needed). One request
-- per command (list follows its pages); `--json` prints the API's objects for scripts. Exit
-- status: 0 done, 1 the API refused (one line naming the id), 2 a usage mistake.
local cjson = require "cjson"
local mb = require "moonbox"
local net = require "moonbox.cli.network"
local core = require "moonbox.core"
local background = require "moonbox.e2b.background"
local client_mod = require "moonbox.e2b.client"
local errors = require "moonbox.errors"
local sched = require "moonbox.sched"
local specs = require "moonbox.subprocess.spec"
local M = {}

local D_NOTE = "D (a lease): seconds as E2B's CLI counts them (300), or with a unit: 500ms, 90s, 5m, 1h."
local JSON = { "--json", "print the API's object as JSON" }
local ID = { "ID", "the sandbox's id (moonbox sandbox list)" }
local NET_OPTS = { { "--allow-out X", "allow connections to X: an address, a CIDR or a host name (repeatable)" },
  { "--deny-out Y", "deny connections to Y: an address or a CIDR, 0.0.0.0/0 for all (repeatable)" },
  { "--no-internet", "no internet access at all" } }

-- Each command's help (moonbox.cli's M.HELP), in the order of `moonbox sandbox --help`.
M.COMMAND_HELP = {
  { path = "sandbox", about = "Call the sandbox API of the endpoint E2B's variables name (E2B_API_KEY, E2B_DOMAIN, or "
    .. "E2B_API_URL + E2B_SANDBOX_URL), else of the background sandboxd (moonbox sandboxd).",
    commands = { "create", "list", "info", "kill", "pause", "resume", "snapshot", "host", "metrics", "logs", "network", "exec",
      "connect" } },
  { path = "sandbox create",
    usage = { "moonbox sandbox create [--template T] [--timeout D] [--metadata K=V]... [--env K=V]...",
      "[--allow-out X]... [--deny-out Y]... [--no-internet] [--no-public-traffic] [--json]" },
    about = "Start a sandbox that outlives the command and print its id.",
    options = { { "--template T", "the template or snapshot to start from (default: base)" },
      { "--timeout D", "its lease (default: 300 seconds)" }, { "--metadata K=V", "a metadata pair (repeatable)" },
      { "--env K=V", "an environment variable of its processes (repeatable)" }, NET_OPTS[1], NET_OPTS[2], NET_OPTS[3],
      { "--no-public-traffic", "its ports answer only requests with its e2b-traffic-access-token" }, JSON },
    notes = D_NOTE },
  { path = "sandbox list", usage = { "moonbox sandbox list [--metadata K=V]... [--state running|paused]... [--limit N] [--json]" },
    about = "List the sandboxes of this API key.",
    options = { { "--metadata K=V", "only those whose metadata has K=V (repeatable: all of them)" },
      { "--state running|paused", "only those in this state (repeatable)" }, { "--limit N", "at most N per request" }, JSON } },
  { path = "sandbox info", usage = { "moonbox sandbox info ID [--json]" },
    about = "Print a sandbox's template, state, lease, metadata and network rules.", args = { ID }, options = { JSON } },
  { path = "sandbox kill", usage = { "moonbox sandbox kill ID... | --all [--metadata K=V]..." },
    about = "Kill sandboxes: the given ones, or every one (of this API key) whose metadata match.",
    args = { { "ID...", "the sandboxes to kill" } },
    options = { { "--all", "kill every sandbox of this API key (with --metadata: only those that match)" },
      { "--metadata K=V", "with --all: only sandboxes whose metadata has K=V (repeatable: all of them)" } } },
  { path = "sandbox pause", usage = { "moonbox sandbox pause ID [--json]" },
    about = "Pause a sandbox (its processes freeze; resume brings it back).", args = { ID }, options = { JSON } },
  { path = "sandbox resume", usage = { "moonbox sandbox resume ID [--timeout D] [--json]" },
    about = "Resume a paused sandbox; its lease restarts.", args = { ID },
    options = { { "--timeout D", "the new lease (default: 300 seconds)" }, JSON }, notes = D_NOTE },
  { path = "sandbox snapshot", usage = { "moonbox sandbox snapshot ID [--name NAME] [--json]" },
    about = "Snapshot a running sandbox: a template new sandboxes start from (create --template).",
    args = { ID }, options = { { "--name NAME", "a name for the snapshot" }, JSON },
    notes = "moonbox sandbox snapshot list lists snapshots; moonbox sandbox snapshot delete ID deletes one." },
  { path = "sandbox snapshot list", usage = { "moonbox sandbox snapshot list [--sandbox ID] [--json]" },
    about = "List snapshots (newest first).",
    options = { { "--sandbox ID", "only the snapshots of this sandbox" }, JSON } },
  { path = "sandbox snapshot delete", usage = { "moonbox sandbox snapshot delete SNAPSHOT..." },
    about = "Delete snapshots (E2B lists snapshots as templates: this deletes the template).",
    args = { { "SNAPSHOT...", "a snapshot's id or name" } } },
  { path = "sandbox host", usage = { "moonbox sandbox host ID PORT [--json]" },
    about = "Print the URL of a port inside the sandbox (and the header a request there needs).",
    args = { ID, { "PORT", "a port in 1..65535" } }, options = { JSON } },
  { path = "sandbox metrics", usage = { "moonbox sandbox metrics ID [--json]" },
    about = "Print a sandbox's CPU, memory and disk use over time.", args = { ID }, options = { JSON } },
  { path = "sandbox logs", usage = { "moonbox sandbox logs ID [--follow] [--json]" },
    about = "Print a sandbox's log: what happened to it (created, paused, resumed, its lease) and the processes it ran.",
    args = { ID }, options = { { "-f, --follow", "keep printing new entries until the sandbox is gone (Ctrl-C stops)" },
      { "--json", "one JSON object per line: timestamp, level, message, fields" } } },
  { path = "sandbox network", usage = { "moonbox sandbox network ID [--allow-out X]... [--deny-out Y]... [--no-internet] | --clear [--json]" },
    about = "Replace a sandbox's egress rules as a whole (what is not given is cleared).", args = { ID },
    options = { NET_OPTS[1], NET_OPTS[2], NET_OPTS[3], { "--clear", "remove every rule" }, JSON } },
  { path = "sandbox exec", usage = { "moonbox sandbox exec ID [-b] [-c CWD] [-u USER] [-e K=V]... -- CMD [ARGS...]" },
    about = "Run a command in a running sandbox: its output as it comes, this terminal's stdin, its exit status.",
    args = { ID, { "CMD [ARGS...]", "the program (a PATH name or an absolute path) and its arguments; no shell" } },
    options = { { "-b, --background", "start it in the background and print its pid (its output is not kept)" },
      { "-c, --cwd CWD", "its working directory (default: the user's home)" },
      { "-u, --user USER", "the user it runs as (default: the sandbox's default user)" },
      { "-e, --env K=V", "an environment variable (repeatable)" } },
    notes = "The exit status is the command's (128 + N when signal N ended it). SIGINT, SIGTERM or SIGHUP here\n"
      .. "sends it SIGTERM (a second one SIGKILL). An error (no such sandbox, a paused one, a program that\n"
      .. "cannot start) is one line, exit 1." },
  { path = "sandbox connect", usage = { "moonbox sandbox connect ID" },
    about = "Open an interactive terminal in a running sandbox: its login shell on a new PTY the size of this terminal.",
    args = { ID },
    notes = "Every key goes to the sandbox's terminal (Ctrl-C too: it interrupts the remote program) while this\n"
      .. "terminal is in raw mode; it is restored however the session ends. A resize of this terminal resizes\n"
      .. "the remote one. The exit status is the shell's (exit 3 → 3). SIGINT, SIGTERM or SIGHUP here kill the\n"
      .. "remote shell and exit 128 + N. stdin must be a terminal (else exit 2); an error (no such sandbox, a\n"
      .. "paused one, the sandbox gone meanwhile) is one line, exit 1. The sandbox's lease is left alone." },
}

local function line(s) io.stdout:write(s, "\n") end

-- JSON; an item's network lists stay arrays when empty (lua-cjson writes {} for empty tables).
local function encode(v)
  local items = type(v) == "table" and (v.sandboxId and { v } or v) or {}
  local patched = false
  for _, it in ipairs(items) do
    if type(it) == "table" and type(it.network) == "table" then
      it.network.allowOut, it.network.denyOut = net.array(it.network.allowOut), net.array(it.network.denyOut)
      patched = true
    end
  end
  if patched then return net.encode(v) end
  local cjson = cjson.new()
  return cjson.encode(v)
end

-- --allow-out / --deny-out values checked as sandboxd parses them: a bad one is a usage mistake
-- naming the flag. → list | nil
local function entries_opt(cli, list, cmd, flag)
  if not list then return nil end
  local key = flag == "--allow-out" and "allowOut" or "denyOut"
  for _, v in ipairs(list) do
    local _, err = core.egress.parse{ [key] = { v } }
    if err then
      local why = err.reason or err.message
      if why:sub(1, 1) == '"' then cli.usage_error("sandbox %s: %s %s", cmd, flag, why) end
      cli.usage_error("sandbox %s: %s %q: %s", cmd, flag, v, why)
    end
  end
  return list
end

-- "internet on; allowOut a, b; denyOut 0.0.0.0/0" from an item
local function network_text(it)
  local n = it.network or {}
  local parts = { it.allowInternetAccess == nil and "internet (not reported)"
    or ("internet " .. (it.allowInternetAccess and "on" or "off")) }
  parts[#parts + 1] = #(n.allowOut or {}) > 0 and ("allowOut " .. table.concat(n.allowOut, ", ")) or "no allowOut"
  parts[#parts + 1] = #(n.denyOut or {}) > 0 and ("denyOut " .. table.concat(n.denyOut, ", ")) or "no denyOut"
  local hosts = {}
  for h in pairs(n.rules or {}) do hosts[#hosts + 1] = h end
  table.sort(hosts)
  for _, h in ipairs(hosts) do
    local set = {}
    for _, r in ipairs(n.rules[h]) do
      local names = {}
      for k in pairs(r.transform and r.transform.headers or {}) do names[#names + 1] = k end
      table.sort(names)
      for _, k in ipairs(names) do set[#set + 1] = k .. ": " .. r.transform.headers[k] end
    end
    parts[#parts + 1] = ("rules[%s] %s"):format(h, table.concat(set, ", "))
  end
  if n.allowPublicTraffic == false then parts[#parts + 1] = "ports need e2b-traffic-access-token" end
  return table.concat(parts, "; ")
end

-- "k1=v1,k2=v2" (sorted): metadata in a table row (sandbox list, secret list).
local function metadata_text(md)
  local keys = {}
  for k in pairs(md or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for i, k in ipairs(keys) do keys[i] = k .. "=" .. tostring(md[k]) end
  return table.concat(keys, ",")
end
M.metadata_text = metadata_text

-- Options anywhere among the arguments (`resume ID --timeout 60`). → opts, positionals
local function parse_all(cli, argv, i, spec, cmd)
  local opts, pos = {}, {}
  while i <= #argv do
    local o, nexti = cli.parse(argv, i, spec, cmd)
    for k, v in pairs(o) do
      if opts[k] ~= nil and spec[k] ~= "list" then cli.usage_error("%s: option %s given twice", cmd, k) end
      if spec[k] == "list" and opts[k] then for _, x in ipairs(v) do table.insert(opts[k], x) end else opts[k] = v end
    end
    if nexti > #argv then break end
    if argv[nexti - 1] == "--" then                  -- everything after -- is positional
      for k = nexti, #argv do pos[#pos + 1] = argv[k] end
      break
    end
    pos[#pos + 1] = argv[nexti]
    i = nexti + 1
  end
  return opts, pos
end

M.parse_all = parse_all

local function id_arg(cli, argv, pos, cmd)
  local id = argv[pos]
  if not id then cli.usage_error("sandbox %s: which sandbox? (moonbox sandbox %s ID)", cmd, cmd) end
  if not id:match("^[%w%-]+$") then cli.usage_error("sandbox %s: %q is not a sandbox id", cmd, id) end
  return id
end

local function no_more(cli, argv, pos, cmd)
  if argv[pos] then cli.usage_error("sandbox %s: unexpected argument %s", cmd, argv[pos]) end
end

-- The options and the one sandbox id of `sandbox CMD ID [options]`. → opts, id
local function one_id(cli, argv, i, cmd, spec)
  spec = spec or {}
  spec["--json"] = spec["--json"] or "flag"
  local opts, args = parse_all(cli, argv, i, spec, "sandbox " .. cmd)
  local id = id_arg(cli, args, 1, cmd)
  no_more(cli, args, 2, cmd)
  return opts, id
end

-- Each command: (cli, client, argv, i) → exit status | nil, err
local commands = {}

local function show(opts, v, text)
  if opts["--json"] then line(encode(v)) else line(text) end
  return 0
end

local function pairs_opt(cli, list, cmd, opt)
  local t
  for _, kv in ipairs(list or {}) do
    local k, v = kv:match("^([^=]+)=(.*)$")
    if not k then cli.usage_error("%s: %s %s: expected KEY=VALUE", cmd, opt, kv) end
    t = t or {}
    t[k] = v
  end
  return t
end

-- A lease as E2B's CLI gives it: seconds, or a number with a unit. → milliseconds
local UNITS = { [""] = 1000, s = 1000, ms = 1, m = 60000, h = 3600000 }
local function timeout_opt(cli, v, cmd)
  if v == nil then return nil end
  local n, unit = v:match("^(%d+%.?%d*)(%a*)$")
  local ms = n and UNITS[unit] and tonumber(n) * UNITS[unit]
  if not ms or ms <= 0 or ms == math.huge then
    cli.usage_error("%s: --timeout %s: expected seconds (300) or a duration with a unit (500ms, 90s, 5m, 1h)", cmd, v)
  end
  return math.tointeger(math.ceil(ms))
end

-- A sandbox for later commands (a composition's sandboxId, moonbox sync across runs).
function commands.create(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--template"] = "value", ["--timeout"] = "value",
    ["--metadata"] = "list", ["--env"] = "list", ["--allow-out"] = "list", ["--deny-out"] = "list",
    ["--no-internet"] = "flag", ["--no-public-traffic"] = "flag", ["--json"] = "flag" }, "sandbox create")
  no_more(cli, args, 1, "create")
  if opts["--template"] == "" then cli.usage_error("sandbox create: --template must not be empty") end
  local allow = entries_opt(cli, opts["--allow-out"], "create", "--allow-out")
  local deny = entries_opt(cli, opts["--deny-out"], "create", "--deny-out")
  local o = { template = opts["--template"], timeoutMs = timeout_opt(cli, opts["--timeout"], "sandbox create"),
    metadata = pairs_opt(cli, opts["--metadata"], "sandbox create", "--metadata"),
    envVars = pairs_opt(cli, opts["--env"], "sandbox create", "--env"),
    network = (allow or deny) and { allowOut = allow, denyOut = deny } or nil }
  if opts["--no-internet"] then o.allowInternetAccess = false end
  if opts["--no-public-traffic"] then
    o.network = o.network or {}
    o.network.allowPublicTraffic = false
  end
  return function(c)
    local it, err = c:create(o)
    if not it then return nil, err end
    return show(opts, it, it.sandboxId)
  end
end

function commands.list(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--metadata"] = "list", ["--state"] = "list", ["--limit"] = "value",
    ["--json"] = "flag" }, "sandbox list")
  no_more(cli, args, 1, "list")
  local q = { metadata = pairs_opt(cli, opts["--metadata"], "sandbox list", "--metadata") }
  for _, s in ipairs(opts["--state"] or {}) do
    if s ~= "running" and s ~= "paused" then cli.usage_error("sandbox list: --state %s: expected running or paused", s) end
    q.state = q.state or {}
    q.state[#q.state + 1] = s
  end
  if opts["--limit"] then
    q.limit = math.tointeger(tonumber(opts["--limit"]))
    if not q.limit or q.limit < 1 then cli.usage_error("sandbox list: --limit %s: expected a positive integer", opts["--limit"]) end
  end
  return function(c)
    local items, err = c:listAll(q)
    if not items then return nil, err end
    if opts["--json"] then line(#items == 0 and "[]" or encode(items)) return 0 end
    local row = cli.rows()
    row(("%-24s %-16s %-8s %-20s %s"):format("SANDBOX ID", "TEMPLATE", "STATE", "END", "METADATA"))
    for _, it in ipairs(items) do
      row(("%-24s %-16s %-8s %-20s %s"):format(it.sandboxId, tostring(it.templateId or ""), tostring(it.state or ""),
        tostring(it.endAt or ""), metadata_text(it.metadata)))
    end
    return 0
  end
end

function commands.info(cli, argv, i)
  local opts, id = one_id(cli, argv, i, "info")
  return function(c)
    local it, err = c:info(id)
    if not it then return nil, err end
    return show(opts, it, ("%s\ntemplate %s, %s, started %s, ends %s, envd %s%s\nnetwork: %s"):format(it.sandboxId,
      tostring(it.templateId), tostring(it.state), tostring(it.startedAt), tostring(it.endAt), tostring(it.envdVersion),
      next(it.metadata or {}) and (", metadata " .. metadata_text(it.metadata)) or "", network_text(it)))
  end
end

-- The sandbox's egress rules replaced as a whole (E2B's PUT /sandboxes/{id}/network: what is not
-- given is cleared), then the rules in force as getInfo reports them.
function commands.network(cli, argv, i)
  local opts, id = one_id(cli, argv, i, "network", { ["--allow-out"] = "list", ["--deny-out"] = "list",
    ["--no-internet"] = "flag", ["--clear"] = "flag" })
  local given = opts["--allow-out"] or opts["--deny-out"] or opts["--no-internet"]
  if opts["--clear"] and given then
    cli.usage_error("sandbox network: --clear removes every rule: give it alone")
  end
  if not (given or opts["--clear"]) then
    cli.usage_error("sandbox network: give --allow-out, --deny-out, --no-internet or --clear (the rules are replaced as a whole)")
  end
  local o = { allowOut = entries_opt(cli, opts["--allow-out"], "network", "--allow-out"),
    denyOut = entries_opt(cli, opts["--deny-out"], "network", "--deny-out") }
  if opts["--no-internet"] then o.allowInternetAccess = false end
  return function(c)
    local ok, err = c:updateNetwork(id, o)
    if not ok then return nil, err end
    local it, ierr = c:info(id)
    if not it then return nil, ierr end
    if opts["--json"] then
      line(encode({ sandboxId = id, network = it.network, allowInternetAccess = it.allowInternetAccess }))
      return 0
    end
    line(("%s network: %s"):format(id, network_text(it)))
    return 0
  end
end

-- "sandbox X not found", the same words for every command that names a sandbox the API does
-- not know.
function commands.kill(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--all"] = "flag", ["--metadata"] = "list" }, "sandbox kill")
  local md = pairs_opt(cli, opts["--metadata"], "sandbox kill", "--metadata")
  if opts["--all"] then
    if args[1] then cli.usage_error("sandbox kill: give sandbox ids or --all, not both") end
    return function(c)
      local items, err = c:listAll{ metadata = md }
      if not items then return nil, err end
      local n = 0
      for _, it in ipairs(items) do
        local ok, kerr = c:kill(it.sandboxId)
        if ok == nil then return nil, kerr end
        if ok then line("killed " .. it.sandboxId) n = n + 1 end   -- false: it ended meanwhile
      end
      if n == 0 then line(md and "no sandbox has that metadata: nothing killed" or "no sandboxes: nothing killed") end
      return 0
    end
  end
  if md then cli.usage_error("sandbox kill: --metadata selects what --all kills: give --all too") end
  if not args[1] then cli.usage_error("sandbox kill: which sandbox? give ID... or --all") end
  local ids = {}
  for k = 1, #args do ids[#ids + 1] = id_arg(cli, args, k, "kill") end
  return function(c)
    return cli.delete_each(ids, function(id) return c:kill(id) end, "sandbox", function(id) return "killed " .. id end)
  end
end

function commands.pause(cli, argv, i)
  local opts, id = one_id(cli, argv, i, "pause")
  return function(c)
    local ok, err = c:pause(id)
    if ok == nil then return nil, err end
    return show(opts, { sandboxId = id, paused = true, already = not ok },
      ok and ("paused " .. id) or (id .. " was already paused"))
  end
end

function commands.resume(cli, argv, i)
  local opts, id = one_id(cli, argv, i, "resume", { ["--timeout"] = "value" })
  local ms = timeout_opt(cli, opts["--timeout"], "sandbox resume")
  return function(c)
    local before, ierr = c:info(id)
    if not before then return nil, ierr end
    local it, err = c:resume(id, { timeoutMs = ms })   -- a running one: its lease as --timeout says
    if not it then return nil, err end
    local already = before.state == "running"
    it.already = already
    return show(opts, it, already and (id .. " was already running") or ("resumed " .. id))
  end
end

-- `snapshot ID` takes one; `snapshot list`, `snapshot delete SNAPSHOT...` (GET /snapshots, and
-- DELETE /templates/{id}: E2B lists snapshots as templates).
local snapshot_sub = {}

function snapshot_sub.list(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--sandbox"] = "value", ["--json"] = "flag" }, "sandbox snapshot list")
  if args[1] then cli.usage_error("sandbox snapshot list: unexpected argument %s", args[1]) end
  local sid = opts["--sandbox"]
  if sid and not sid:match("^[%w%-]+$") then cli.usage_error("sandbox snapshot list: --sandbox %q is not a sandbox id", sid) end
  return function(c)
    local all, token = {}, nil
    repeat
      local page, nt = c:snapshots{ sandboxId = sid, nextToken = token }
      if not page then return nil, nt end
      for _, x in ipairs(page) do all[#all + 1] = x end
      token = nt
    until not token
    if opts["--json"] then
      for _, x in ipairs(all) do x.names = net.array(x.names) end
      line(net.encode(net.array(all)))
      return 0
    end
    local row = cli.rows()
    row(("%-40s %s"):format("SNAPSHOT ID", "NAMES"))
    for _, x in ipairs(all) do row(("%-40s %s"):format(x.snapshotId, table.concat(x.names, ", "))) end
    return 0
  end
end

function snapshot_sub.delete(cli, argv, i)
  local _, args = parse_all(cli, argv, i, {}, "sandbox snapshot delete")
  if not args[1] then cli.usage_error("sandbox snapshot delete: which snapshot? (moonbox sandbox snapshot delete SNAPSHOT...)") end
  for _, a in ipairs(args) do
    if a == "" then cli.usage_error("sandbox snapshot delete: a snapshot id must not be empty") end
  end
  return function(c)
    return cli.delete_each(args, function(ref) return c:deleteSnapshot(ref) end, "snapshot",
      function(ref) return "deleted snapshot " .. ref end)
  end
end

function commands.snapshot(cli, argv, i)
  local sub = argv[i]
  if sub == "list" or sub == "delete" then
    cli.in_command("sandbox snapshot " .. sub)
    return snapshot_sub[sub](cli, argv, i + 1)
  end
  local opts, id = one_id(cli, argv, i, "snapshot", { ["--name"] = "value" })
  if opts["--name"] == "" then cli.usage_error("sandbox snapshot: --name must not be empty") end
  return function(c)
    local s, err = c:snapshot(id, { name = opts["--name"] })
    if not s then return nil, err end
    return show(opts, s, ("snapshot %s%s"):format(s.snapshotId, #s.names > 0 and (" (" .. table.concat(s.names, ", ") .. ")") or ""))
  end
end

-- 1536 → "1.5 KiB" (bytes below 1 KiB as they are); "?" when the server gave none.
local function human_bytes(n)
  n = tonumber(n)
  if not n then return "?" end
  if n < 1024 then return ("%d B"):format(n) end
  local units, u = { "KiB", "MiB", "GiB", "TiB" }, 0
  repeat n, u = n / 1024, u + 1 until n < 1024 or u == #units
  return ("%.1f %s"):format(n, units[u])
end

function commands.metrics(cli, argv, i)
  local opts, id = one_id(cli, argv, i, "metrics")
  return function(c)
    local m, err = c:metrics(id)
    if not m then return nil, err end
    if opts["--json"] then line(#m == 0 and "[]" or encode(m)) return 0 end
    local row = cli.rows()
    row(("%-26s %7s %5s %11s %11s %11s"):format("TIMESTAMP", "CPU %", "CPUS", "MEM USED", "MEM TOTAL", "DISK USED"))
    for _, x in ipairs(m) do
      row(("%-26s %7.1f %5s %11s %11s %11s"):format(tostring(x.timestamp), tonumber(x.cpuUsedPct) or 0,
        tostring(math.tointeger(x.cpuCount) or x.cpuCount), human_bytes(x.memUsed), human_bytes(x.memTotal), human_bytes(x.diskUsed)))
    end
    return 0
  end
end

-- "2026-12-03T06:28:19.368Z info  process ended pid=7 status=exit status 3", fields sorted.
local function log_line(e)
  local keys = {}
  for k in pairs(e.fields or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = { ("%-24s %-5s %s"):format(tostring(e.timestamp), tostring(e.level), tostring(e.message)) }
  for _, k in ipairs(keys) do parts[#parts + 1] = ("%s=%s"):format(k, tostring(e.fields[k])) end
  return table.concat(parts, " ")
end

M.FOLLOW_MS = 500
function commands.logs(cli, argv, i)
  local opts, id = one_id(cli, argv, i, "logs", { ["--follow"] = "flag", ["-f"] = "flag" })
  local follow = opts["--follow"] or opts["-f"]
  return function(c)
    local cursor, at_cursor = 0, 0             -- entries of the cursor's millisecond already shown
    repeat
      local l, err = c:logs(id, { cursor = cursor })
      if not l then
        if follow and cursor > 0 and err.code == "E2B_NOT_FOUND" then     -- it ended
          io.stderr:write(("moonbox: sandbox %s is gone\n"):format(id))
          return 0
        end
        return nil, err
      end
      local skip = at_cursor
      for _, e in ipairs(l) do
        local ts = e.timestampMs or cursor
        if ts == cursor and skip > 0 then skip = skip - 1
        else
          if opts["--json"] then line(encode({ timestamp = e.timestamp, level = e.level, message = e.message, fields = e.fields }))
          else line(log_line(e)) end
          if ts ~= cursor then cursor, at_cursor = ts, 0 end
          at_cursor = at_cursor + 1
        end
      end
      io.stdout:flush()
      if follow then sched.sleep(M.FOLLOW_MS) end
    until not follow
    return 0
  end
end

-- The URL of a port, and the header a request needs when the sandbox was made with
-- allowPublicTraffic false: a second line `e2b-traffic-access-token: TOKEN`, ready for curl -H.
-- getInfo does not carry the token (E2B's, sandboxd's); a connect does: for a running sandbox
-- that wants one, a connect with a 1-second timeout (a connect never shortens a lease). A paused
-- sandbox is not resumed for it: the URL, and a line on stderr saying so.
M.TOKEN_CONNECT_MS = 1000
function commands.host(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--json"] = "flag" }, "sandbox host")
  local id = id_arg(cli, args, 1, "host")
  local port = math.tointeger(tonumber(args[2] or ""))
  if not port or port < 1 or port > 65535 then
    cli.usage_error("sandbox host: expected ID PORT (a port in 1..65535), got %s", tostring(args[2]))
  end
  no_more(cli, args, 3, "host")
  return function(c)
    local info, err = c:info(id)                 -- a host for a sandbox that exists
    if not info then return nil, err end
    local closed = info.network and info.network.allowPublicTraffic == false
    local token = info.trafficAccessToken
    if closed and not token and info.state ~= "paused" then
      local ci, cerr = c:connect(id, { timeoutMs = M.TOKEN_CONNECT_MS })
      if not ci then return nil, cerr end
      token = ci.trafficAccessToken
    end
    local url, headers = c:host(id, port, info.domain, token)
    if opts["--json"] then
      line(encode({ url = url, headers = headers, allowPublicTraffic = not closed }))
      return 0
    end
    line(url)
    for k, v in pairs(headers) do line(k .. ": " .. v) end
    if closed and not next(headers) then
      io.stderr:write(("moonbox: sandbox %s answers only requests with the e2b-traffic-access-token header%s\n"):format(id,
        info.state == "paused" and "; it is paused: resume it (moonbox sandbox resume ID) and ask again for the token"
        or ", and the server gave no token"))
    end
    return 0
  end
end

-- `exec ID [options] [--] CMD [ARGS...]`: options before and after ID; the command is what follows
-- `--`, or the first argument after ID that is not an option.
-- One batch of an envd process stream's facts (exec, connect): on_start(pid), on_end(outcome),
-- on_error(err) as they come.
local function take_facts(facts, on_start, on_end, on_error)
  for _, f in ipairs(facts) do
    if f.kind == "start" then on_start(math.tointeger(f.pid))
    elseif f.kind == "end" then on_end(specs.outcome_from_end{ exitCode = f.exit_code, status = f.status })
    elseif f.kind == "stream_error" then on_error(errors.from_connect("process.Process/Start", f.code, f.message, 200))
    end
  end
end

local EXEC_SPEC = { ["-b"] = "flag", ["--background"] = "flag", ["-c"] = "value", ["--cwd"] = "value",
  ["-u"] = "value", ["--user"] = "value", ["-e"] = "list", ["--env"] = "list" }
local EXEC_ALIAS = { ["--background"] = "-b", ["--cwd"] = "-c", ["--user"] = "-u", ["--env"] = "-e" }
local EXEC_NAME = { ["-b"] = "-b/--background", ["-c"] = "-c/--cwd", ["-u"] = "-u/--user" }
local SIGNUM = {}
for n, name in pairs(specs.SIGNALS) do SIGNUM[name] = n end

-- The exit status of an outcome ({ exitCode } | { signal }): 128 + N for signal N, as a shell.
function M.exit_status(outcome)
  if outcome.signal then return 128 + (SIGNUM[outcome.signal] or 0) end
  return outcome.exitCode
end

-- The command's stdin: what this process reads on fd 0 (until EOF), sent to the process `pid`
-- (to its PTY when `pty`) as it comes. A local `cat` reads it (the loop goes on meanwhile) into a
-- stream a task reads. → stop()
local function pump_stdin(sb, s, pid, pty)
  local reader = mb.pstream.spawn({ argv = { "/bin/cat" }, stdin_inherit = true },
    { raw = true, stdout = "pipe", stderr = "discard" })
  local task = mb.spawn(function()
    while reader do
      local data = reader:read("stdout")
      if data == nil then break end                 -- EOF (or cat could not read)
      if not sb:send_input(s, pid, data, pty) then return end   -- the process has gone
    end
    if not pty then sb:close_input(s, pid) end
  end)
  return function()
    task:cancel()
    if reader then pcall(reader.kill, reader, "SIGKILL") reader:close() end
  end
end

function commands.exec(cli, argv, i)
  local name = "sandbox exec"
  local o1, p = cli.parse(argv, i, EXEC_SPEC, name)
  local id = argv[p]
  if not id or (p > i and argv[p - 1] == "--") then
    cli.usage_error("sandbox exec: which sandbox? (moonbox sandbox exec ID -- CMD [ARGS...])")
  end
  if not id:match("^[%w%-]+$") then cli.usage_error("sandbox exec: %q is not a sandbox id", id) end
  local o2, q = cli.parse(argv, p + 1, EXEC_SPEC, name)
  local opts = {}
  for _, o in ipairs({ o1, o2 }) do
    for k, v in pairs(o) do
      local key = EXEC_ALIAS[k] or k
      if EXEC_SPEC[key] == "list" then
        opts[key] = opts[key] or {}
        for _, x in ipairs(v) do table.insert(opts[key], x) end
      else
        if opts[key] ~= nil then cli.usage_error("sandbox exec: option %s given twice", EXEC_NAME[key]) end
        opts[key] = v
      end
    end
  end
  local command = table.move(argv, q, #argv, 1, {})
  if #command == 0 then cli.usage_error("sandbox exec: which command? (moonbox sandbox exec ID -- CMD [ARGS...])") end
  if command[1] == "" then cli.usage_error("sandbox exec: the command must not be empty") end
  for _, k in ipairs({ "-c", "-u" }) do
    if opts[k] == "" then cli.usage_error("sandbox exec: %s must not be empty", EXEC_NAME[k]) end
  end
  local o = { envs = pairs_opt(cli, opts["-e"], name, "-e"), cwd = opts["-c"], user = opts["-u"] }
  -- The stream's facts until it closes: → pid, outcome, err (on_start(pid) when it starts)
  local function follow(sb, s, on_start, stop_at_start)
    local pid, outcome, err
    while true do
      local facts, ferr = s:next_facts()
      if not facts then err = ferr break end
      take_facts(facts, function(p) pid = p if on_start then on_start(p) end end,
        function(o) outcome = o end, function(e) err = err or e end)
      if (stop_at_start and pid) or err then break end
    end
    if not err and not (stop_at_start and pid) then
      local ok, rerr = s:result()
      if not ok and rerr then err = rerr end
    end
    if err then err = sb:explain(sb:stream_error(s, err), command[1]) end
    return pid, outcome, err
  end
  return function(c)
    local sb, err = c:attach(id)
    if not sb then return nil, err end
    if opts["-b"] then
      o.stdin = false
      local s, serr = sb:command(command, o, { stdout = "discard", stderr = "discard" })
      if not s then return nil, serr end
      local pid, _, ferr = follow(sb, s, nil, true)
      s:close()                                     -- sandboxd: the client is gone, the process goes on
      if not pid then return nil, ferr or errors.new("E2B_PROTOCOL", command[1] .. ": did not start") end
      line(tostring(pid))
      return 0
    end
    o.stdin = true
    local s, serr = sb:command(command, o, { stdout = { fd = 1 }, stderr = { fd = 2 } })
    if not s then return nil, serr end
    local stop_pump
    local watches, signalled = {}, 0
    local pid, outcome, ferr = follow(sb, s, function(p)
      stop_pump = pump_stdin(sb, s, p)
      -- SIGINT, SIGTERM, SIGHUP here: SIGTERM to the command (envd sends only TERM and KILL),
      -- SIGKILL at the second one
      for _, sig in ipairs({ "SIGINT", "SIGTERM", "SIGHUP" }) do
        watches[#watches + 1] = core.signal(sig, function()
          signalled = signalled + 1
          local to = signalled > 1 and "SIGKILL" or "SIGTERM"
          mb.spawn(function() sb:signal_process(s, p, to) end)
        end)
      end
    end)
    if stop_pump then stop_pump() end
    for _, w in ipairs(watches) do w:close() end
    s:close()
    io.stdout:flush()
    if ferr then return nil, ferr end
    if not outcome then
      return nil, errors.new("E2B_PROTOCOL", ("%s: the stream ended without its exit status%s"):format(
        command[1], pid and "" or " (it did not start)"))
    end
    return M.exit_status(outcome)
  end
end

-- `connect ID`: an interactive login shell on a new PTY in a running sandbox, as E2B's CLI
-- opens one (bash -i -l, TERM=xterm-256color), the size of this terminal. This terminal is in
-- raw mode meanwhile (every byte typed goes to the PTY: ^C is the remote line discipline's to
-- turn into SIGINT), the PTY's output goes to fd 1 as it comes, SIGWINCH resizes the PTY. The
-- lease is left alone (as exec). → exit status: the shell's; 128 + N after SIGINT, SIGTERM or
-- SIGHUP here (the remote shell is killed: it goes with its terminal).
M.CONNECT_SHELL = { "/bin/bash", "-i", "-l" }
M.CONNECT_TERM = "xterm-256color"
M.CONNECT_KILL_MS = 3000       -- after a signal: how long the remote shell's SIGKILL may take

-- → exit status | nil, err, began (the remote shell had had the terminal)
local function session(sb, s)
  local done = mb.event()
  local tty, pid, outcome, err, stop_pump, by_signal, raw_err
  local watches = {}
  local resizing, again = false, false
  local function resize()                        -- a task; one Update at a time, the latest size
    if resizing then again = true return end
    resizing = true
    repeat
      again = false
      local r, c = core.tty_size(0)
      if r and r > 0 and c > 0 then sb:resize(s, pid, r, c) end
    until not again or done.is_set
    resizing = false
  end
  local function started(p)
    pid = p
    local terr
    tty, terr = core.tty_raw(0)
    if not tty then raw_err, err = terr, terr return end
    stop_pump = pump_stdin(sb, s, pid, true)
    watches[#watches + 1] = core.signal("SIGWINCH", function() mb.spawn(resize) end)
    for _, sig in ipairs({ "SIGINT", "SIGTERM", "SIGHUP" }) do
      watches[#watches + 1] = core.signal(sig, function()
        by_signal = by_signal or sig
        done:set(true)
      end)
    end
    mb.spawn(resize)                              -- it may have changed since the request
  end
  local follower = mb.spawn(function()
    while not err do
      local facts, ferr = s:next_facts()
      if not facts then err = ferr break end
      take_facts(facts, function(p) if not pid then started(p) end end,
        function(o) outcome = o end, function(e) err = err or e end)
    end
    if not err then
      local ok, rerr = s:result()
      if not ok and rerr then err = rerr end
    end
    done:set(true)
  end)
  local ok, werr = pcall(done.wait, done)
  -- every way out: the terminal as it was before anything else (the watches stay until then:
  -- a signal meanwhile must not end the process with the terminal raw)
  if tty then tty:restore() end
  for _, w in ipairs(watches) do w:close() end
  if stop_pump then pcall(stop_pump) end
  if not ok then s:close() error(werr, 0) end
  if by_signal or (err and pid and not outcome) then
    follower:cancel()
    if pid and not outcome then                  -- an interactive bash ignores SIGTERM
      local killer = mb.spawn(function() return sb:signal_process(s, pid, "SIGKILL") end)
      killer:join(M.CONNECT_KILL_MS)
    end
  end
  s:close()
  if by_signal then return 128 + (SIGNUM[by_signal] or 0) end
  if err then
    if raw_err then return nil, raw_err end
    return nil, sb:explain(sb:stream_error(s, err), M.CONNECT_SHELL[1]), tty ~= nil
  end
  if not outcome then
    return nil, errors.new("E2B_PROTOCOL", "the terminal's stream ended without the shell's exit status"), tty ~= nil
  end
  if outcome.signal == "SIGKILL" then           -- the sandbox's end kills its processes: say so
    local probe = errors.new("E2B_IO", "the shell was killed")
    local gone = sb:explain(probe, M.CONNECT_SHELL[1])
    if gone ~= probe then return nil, gone, true end
  end
  return M.exit_status(outcome)
end

function commands.connect(cli, argv, i)
  local _, args = parse_all(cli, argv, i, {}, "sandbox connect")
  local id = id_arg(cli, args, 1, "connect")
  no_more(cli, args, 2, "connect")
  if not core.isatty(0) then cli.usage_error("sandbox connect: stdin is not a terminal") end
  return function(c)
    local sb, err = c:attach(id)
    if not sb then return nil, err end
    local rows, cols = core.tty_size(0)
    if not rows or rows < 1 or cols < 1 then rows, cols = 24, 80 end
    local s, serr = sb:command(M.CONNECT_SHELL, { envs = { TERM = M.CONNECT_TERM }, pty = { rows = rows, cols = cols } },
      { stdout = { fd = 1 }, stderr = "discard" })
    if not s then return nil, serr end
    local status, ferr, began = session(sb, s)
    -- an error once the remote shell had the terminal: on a line of its own, not after its prompt
    if began then io.stderr:write("\n") end
    return status, ferr
  end
end

-- act(client) in a task, the client for E2B's variables' endpoint, else the background
-- sandboxd's (started now when it does not run). → table.pack of what act returns
function M.with_client(act)
  return table.pack(mb.run(function()
    local ep, eerr = background.ensure_endpoints()
    if not ep then return nil, eerr end
    local c, cerr = client_mod.new{ endpoints = ep }
    if not c then return nil, cerr end
    return act(c)
  end))
end

-- argv[i] is the subcommand. → exit status | nil, err
function M.main(cli, argv, i)
  local sub = cli.subcommand("sandbox", argv, i, M.COMMAND_HELP[1].commands)
  local act = commands[sub](cli, argv, i + 1)     -- usage is checked before any request
  local res = M.with_client(act)
  local err = res[2]
  if res[1] == nil and type(err) == "table" and err.code == "E2B_NOT_FOUND" then
    -- the same words whichever request found no such sandbox
    local id = tostring(err.message):match("sandbox '([%w%-]+)' not found")
    if id then err.message = ("sandbox %s not found"):format(id) end
  end
  return table.unpack(res, 1, res.n)
end

return M
