-- moonbox.cli.sandbox — `moonbox sandbox create|list|info|kill|pause|resume|snapshot|host|metrics|network`:
-- the sandbox API (moonbox.e2b.client) from the shell, against the endpoint E2B's variables
-- name (E2B_API_KEY, E2B_DOMAIN, or E2B_API_URL + E2B_SANDBOX_URL for a sandboxd). One request
-- per command (list follows its pages); `--json` prints the API's objects for scripts. Exit
-- status: 0 done, 1 the API refused (one line naming the id), 2 a usage mistake.
local M = {}

M.USAGE = [[
       moonbox sandbox create [--template T] [--timeout D] [--metadata K=V]... [--env K=V]...
                              [--allow-out X]... [--deny-out Y]... [--no-internet] [--no-public-traffic] [--json]
       moonbox sandbox list [--metadata K=V]... [--state running|paused]... [--limit N] [--json]
       moonbox sandbox info|pause|metrics ID [--json]
       moonbox sandbox kill ID...
       moonbox sandbox resume ID [--timeout D] [--json]
       moonbox sandbox snapshot ID [--name NAME] [--json]
       moonbox sandbox host ID PORT [--json]
       moonbox sandbox network ID [--allow-out X]... [--deny-out Y]... [--no-internet] | --clear [--json]
       D (a lease): seconds as E2B's CLI counts them (300), or with a unit: 500ms, 90s, 5m, 1h
]]

local function line(s) io.stdout:write(s, "\n") end

-- JSON; an item's network lists stay arrays when empty (lua-cjson writes {} for empty tables).
local function encode(v)
  local net = require "moonbox.cli.network"
  local items = type(v) == "table" and (v.sandboxId and { v } or v) or {}
  local patched = false
  for _, it in ipairs(items) do
    if type(it) == "table" and type(it.network) == "table" then
      it.network.allowOut, it.network.denyOut = net.array(it.network.allowOut), net.array(it.network.denyOut)
      patched = true
    end
  end
  if patched then return net.encode(v) end
  local cjson = require("cjson").new()
  return cjson.encode(v)
end

-- --allow-out / --deny-out values checked as sandboxd parses them: a bad one is a usage mistake
-- naming the flag. → list | nil
local function entries_opt(cli, list, cmd, flag)
  if not list then return nil end
  local key = flag == "--allow-out" and "allowOut" or "denyOut"
  for _, v in ipairs(list) do
    local _, err = require("moonbox.core").egress.parse{ [key] = { v } }
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

local function metadata_text(md)
  local keys = {}
  for k in pairs(md or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for i, k in ipairs(keys) do keys[i] = k .. "=" .. tostring(md[k]) end
  return table.concat(keys, ",")
end

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
    line(("%-24s %-16s %-8s %-20s %s"):format("SANDBOX ID", "TEMPLATE", "STATE", "END", "METADATA"))
    for _, it in ipairs(items) do
      line(("%-24s %-16s %-8s %-20s %s"):format(it.sandboxId, tostring(it.templateId or ""), tostring(it.state or ""),
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

function commands.kill(cli, argv, i)
  local _, args = parse_all(cli, argv, i, {}, "sandbox kill")
  if not args[1] then cli.usage_error("sandbox kill: which sandbox? (moonbox sandbox kill ID...)") end
  local ids = {}
  for k = 1, #args do ids[#ids + 1] = id_arg(cli, args, k, "kill") end
  return function(c)
    for _, id in ipairs(ids) do
      local ok, err = c:kill(id)
      if ok == nil then return nil, err end
      if not ok then
        return nil, require("moonbox.errors").new("E2B_NOT_FOUND", ("sandbox %s not found"):format(id))
      end
      line("killed " .. id)
    end
    return 0
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
    local it, err = c:resume(id, { timeoutMs = ms })
    if not it then return nil, err end
    return show(opts, it, "resumed " .. id)
  end
end

function commands.snapshot(cli, argv, i)
  local opts, id = one_id(cli, argv, i, "snapshot", { ["--name"] = "value" })
  if opts["--name"] == "" then cli.usage_error("sandbox snapshot: --name must not be empty") end
  return function(c)
    local s, err = c:snapshot(id, { name = opts["--name"] })
    if not s then return nil, err end
    return show(opts, s, ("snapshot %s%s"):format(s.snapshotId, #s.names > 0 and (" (" .. table.concat(s.names, ", ") .. ")") or ""))
  end
end

function commands.metrics(cli, argv, i)
  local opts, id = one_id(cli, argv, i, "metrics")
  return function(c)
    local m, err = c:metrics(id)
    if not m then return nil, err end
    if opts["--json"] then line(#m == 0 and "[]" or encode(m)) return 0 end
    line(("%-26s %8s %6s %14s %14s %14s"):format("TIMESTAMP", "CPU %", "CPUS", "MEM USED", "MEM TOTAL", "DISK USED"))
    for _, x in ipairs(m) do
      line(("%-26s %8.1f %6s %14s %14s %14s"):format(tostring(x.timestamp), tonumber(x.cpuUsedPct) or 0,
        tostring(x.cpuCount), tostring(x.memUsed), tostring(x.memTotal), tostring(x.diskUsed)))
    end
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

-- argv[i] is the subcommand. → exit status | nil, err
function M.main(cli, argv, i)
  local sub = argv[i]
  local cmd = sub and commands[sub]
  if not cmd then
    if sub == nil then cli.usage_error("sandbox: expected create, list, info, kill, pause, resume, snapshot, host, metrics or network") end
    cli.usage_error("sandbox: unknown subcommand %s (expected create, list, info, kill, pause, resume, snapshot, host, metrics or network)", sub)
  end
  local act = cmd(cli, argv, i + 1)              -- usage is checked before any request
  local c, cerr = require("moonbox.e2b.client").new{}
  if not c then return nil, cerr end
  local res = table.pack(require("moonbox").run(function() return act(c) end))
  return table.unpack(res, 1, res.n)
end

return M
