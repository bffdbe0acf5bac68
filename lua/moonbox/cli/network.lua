-- moonbox.cli.network — `moonbox policy network`: what a network policy allows and which rule
-- decides each check, without starting a sandbox. Every verdict comes from sandboxd's own
-- decision code (core.egress, sandboxd/egress_rules.c); names are resolved with the host's
-- resolver (core.getaddrinfo) unless --resolve says what they resolve to.
--
-- Exit status: 0 when every check is allowed (for every address its name resolves to), 1 when
-- one is denied or cannot be decided here, 2 for a usage mistake.
local policies = require "moonbox.policies"
local R = require "moonbox.policy.rules"
local cj = require "cjson"
local mb = require "moonbox"
local core = require "moonbox.core"

local M = {}

M.COMMAND_HELP = { { path = "policy network",
  usage = { "moonbox policy network [--compose C] [--policy CONCERN=FILE]... [--check HOST[:PORT] | --check URL]...",
    "[--resolve NAME=ADDR[,ADDR]...]... [--unblock private|link-local|CIDR]... [--json]" },
  about = "Print what the network policy allows and which rule decides each --check (exit 1: one is denied).",
  options = { { "--compose C", "the composition whose policies apply (with --policy over them)" },
    { "--policy CONCERN=FILE", "a policy file merged over the defaults (repeatable)" },
    { "--check HOST[:PORT] | URL", "a destination to decide (repeatable; HOST alone is HOST:443)" },
    { "--resolve NAME=ADDR[,ADDR]...", "what NAME resolves to, instead of this host's resolver (repeatable)" },
    { "--unblock private|link-local|CIDR", "explain as if sandboxd ran with --egress-unblock (repeatable)" },
    { "--json", "print JSON" } } } }

M.HELP = [[
`policy network` prints what the network policy allows (internet on or off, every allow_out and
deny_out entry and every rule with its file:line, sandboxd's safe defaults) and, for each --check,
which rule decides it and which headers the request gets (names and the secret or host variable
each value comes from, never a value): a URL's scheme gives the port (http and ws 80, https and wss 443, ssh 22; tcp:// and
udp:// need one), HOST alone is HOST:443. A host name on TCP 80/443 is decided by name (the Host
header, TLS SNI), any other port by the addresses the name resolves to (here, with the host's
resolver, or as --resolve says). --unblock explains as if sandboxd ran with --egress-unblock.
Exit status: 0 when every check is allowed, 1 when one is denied (or cannot be decided without
its addresses), 2 for a usage mistake.
]]

local SCHEMES = { http = 80, https = 443, ws = 80, wss = 443, ssh = 22, tcp = false, udp = false }

local function egress() return core.egress end

-- JSON with arrays that stay arrays when empty (lua-cjson writes {} for an empty table).
local ARRAY = {}
local function array(t) return setmetatable(t or {}, ARRAY) end
local function encode(v)
  if type(v) ~= "table" then return cj.encode(v) end
  if getmetatable(v) == ARRAY or #v > 0 then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = encode(x) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = cj.encode(k) .. ":" .. encode(v[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end
M.encode, M.array = encode, array

-- An address literal? (IPv4 or IPv6, no brackets)
local function is_addr(s) return (egress().classify(s)) ~= nil end

-- "--check X" → { text, host, port, proto, scheme } (a usage mistake raises through cli)
local function parse_check(cli, v)
  local function bad(why) cli.usage_error("policy network: --check %s: %s", v, why) end
  local scheme, rest = v:match("^(%a[%w+.-]*)://(.*)$")
  local hostport = rest or v
  if scheme then
    scheme = scheme:lower()
    hostport = hostport:match("^([^/?#]*)")
    hostport = hostport:gsub("^.*@", "")              -- user:password@
  end
  local host, port
  if hostport:sub(1, 1) == "[" then
    host, port = hostport:match("^%[([^%]]+)%]:?(%d*)$")
    if not host then bad("expected [IPv6]:PORT") end
    if not is_addr(host) or not host:find(":", 1, true) then bad(("%s is not an IPv6 address"):format(host)) end
  elseif select(2, hostport:gsub(":", "")) > 1 then   -- a bare IPv6 address
    host, port = hostport, ""
    if not is_addr(host) then bad(("%s is not an IPv6 address (write [ADDR]:PORT with a port)"):format(host)) end
  else
    host, port = hostport:match("^([^:]*):?(%d*)$")
    if not host or (hostport:find(":", 1, true) and port == "") then bad("expected HOST[:PORT] or a URL") end
  end
  if host == "" then bad("no host") end
  local proto = scheme == "udp" and "udp" or "tcp"
  if port ~= "" then
    port = math.tointeger(tonumber(port))
    if not port or port < 1 or port > 65535 then bad("the port must be in 1..65535") end
  elseif scheme then
    if SCHEMES[scheme] == nil then bad(("unknown scheme %s:// (give the port: %s://HOST:PORT)"):format(scheme, scheme)) end
    if SCHEMES[scheme] == false then bad(("%s:// needs a port"):format(scheme)) end
    port = SCHEMES[scheme]
  else
    port = 443
  end
  local addr = is_addr(host)
  if not addr then
    local _, err = egress().parse{ allowOut = { host } }
    if err or host:sub(1, 2) == "*." then bad(("%s is neither an address nor a host name"):format(host)) end
    host = host:lower():gsub("%.$", "")
  end
  return { text = v, host = host, port = port, proto = proto, is_addr = addr }
end

-- --resolve NAME=ADDR[,ADDR...] → { name → { addr... } }
local function parse_resolve(cli, list)
  local out = {}
  for _, v in ipairs(list or {}) do
    local name, addrs = v:match("^([^=]+)=(.+)$")
    if not name then cli.usage_error("policy network: --resolve %s: expected NAME=ADDR[,ADDR...]", v) end
    local l = {}
    for a in addrs:gmatch("[^,]+") do
      if not is_addr(a) then cli.usage_error("policy network: --resolve %s: %s is not an IP address", v, a) end
      l[#l + 1] = a
    end
    out[name:lower():gsub("%.$", "")] = l
  end
  return out
end

-- The host's resolver, from inside a task. → list | nil, err
local function resolve(name)
  local ev = mb.event()
  local req, rerr = core.getaddrinfo(name, function() ev:set(true) end)
  if not req then return nil, rerr end
  local ok, err = ev:wait(10000)
  if not ok then req:cancel() return nil, err end
  return req:result()
end

-- One check: → { check, host, port, proto, by, dns, verdict, addresses = { ... }, note }
local function explain(p, rules, c, resolved_by)
  local r = { check = c.text, host = c.host, port = c.port, proto = c.proto, addresses = array() }
  local by_name = not c.is_addr and c.proto == "tcp" and (c.port == 80 or c.port == 443)
  r.by = by_name and "name" or "address"
  local function entry(d)
    return { verdict = d.verdict, list = d.list, field = d.field, index = d.index, entry = d.entry, where = d.where, why = d.why }
  end
  if c.is_addr then
    local d = p.decide({ addr = c.host, port = c.port, proto = c.proto }, rules)
    local e = entry(d)
    e.addr = c.host
    if d.verdict == "need-name" then
      e.verdict = "deny"
      e.why = "decided by the host name a connection names (TLS SNI, HTTP Host); a connection to the bare address names none"
    end
    r.addresses[1] = e
    r.verdict = e.verdict == "deny" and "deny" or "allow"
    return r
  end
  r.dns = rules:dns_allowed(c.host)
  local addrs, rerr = resolved_by(c.host)
  r.resolved = addrs and (addrs.from or "host") or nil
  if not addrs then
    r.resolve_error = tostring(rerr)
    -- decided by name alone where a name decides (the safe defaults still apply to its addresses)
    if by_name then
      for k, e in ipairs(p.allow_out) do
        if egress().parse{ internet = false, allowOut = { e } }:dns_allowed(c.host) then   -- e names c.host
          r.verdict = "allow"
          r.by_name = { field = "allow_out", index = k, entry = e, where = p.where("allowOut", k) }
          break
        end
      end
    end
    if not r.verdict then r.verdict = r.dns and "unknown" or "deny" end
    return r
  end
  local all = true
  for _, a in ipairs(addrs) do
    local d = p.decide({ addr = a, port = c.port, proto = c.proto, name = by_name and c.host or nil }, rules)
    local e = entry(d)
    e.addr = a
    if d.verdict == "allow-name" then
      -- sandboxd connects to the name as the host resolves it: each address checked again
      local again = rules:decide{ addr = a, port = c.port, resolved = true }
      if again.verdict == "deny" then e.verdict, e.why = "deny", "allowed by name, but " .. again.why end
    end
    if e.verdict == "deny" or e.verdict == "need-name" then all = false end
    r.addresses[#r.addresses + 1] = e
  end
  if #addrs == 0 then all = false end
  if not r.dns then all = false end
  r.verdict = all and "allow" or "deny"
  return r
end


-- Which headers a checked request gets from the policy's rules (names and where each value comes
-- from, never a value). → { rule, where, headers = { { name, secret | fromEnv, format, text } },
--   why } | nil when the policy has no rules
local function headers_for(p, r, c)
  if next(p.rules) == nil then return nil end
  local out = { headers = array() }
  if c.is_addr then
    out.why = "a rule matches host names, and a request to a bare address names none"
    return out
  end
  if c.proto ~= "tcp" or (c.port ~= 80 and c.port ~= 443) then
    out.why = "rules apply to HTTP on port 80 and HTTPS on 443 only"
    return out
  end
  local key, entry, where = p.rule_for(c.host)
  if not key then out.why = ("no rule matches %s"):format(c.host) return out end
  out.rule, out.where = key, where
  for _, h in ipairs(R.headers({ [key] = entry })) do
    out.headers[#out.headers + 1] = { name = h.header, secret = h.secret, fromEnv = h.fromEnv, format = h.format,
      text = R.header_text(h) }
  end
  if r.verdict == "deny" then out.why = "denied: the request never leaves" end
  return out
end

local function rule_text(e)
  if e.field then
    return ("%s[%d] %q (%s)"):format(e.field, e.index, e.entry, e.where or "?")
  end
  return nil
end

local function verdict_line(e)
  local rule = rule_text(e)
  if e.verdict == "allow-name" then return ("by name: %s"):format(rule) end
  if rule and e.verdict == "allow" then return "by " .. rule end
  if rule and e.verdict == "deny" then return "by " .. rule end
  return e.why or ""
end

-- `moonbox policy network ...` → exit status | nil, err
function M.main(cli, argv, i)
  local opts, pos = cli.parse(argv, i, { ["--compose"] = "value", ["--policy"] = "list", ["--check"] = "list",
    ["--resolve"] = "list", ["--unblock"] = "list", ["--json"] = "flag" }, "policy network")
  if argv[pos] then cli.usage_error("policy network: unexpected argument %s (checks are --check HOST[:PORT] or --check URL)", argv[pos]) end
  local checks = {}
  for _, v in ipairs(opts["--check"] or {}) do checks[#checks + 1] = parse_check(cli, v) end
  local fixed = parse_resolve(cli, opts["--resolve"])
  for _, u in ipairs(opts["--unblock"] or {}) do
    local _, err = egress().parse{ unblock = { u } }
    if err then cli.usage_error("policy network: --unblock %s", err.reason) end
  end
  local set, comp = cli.policy_set(opts)
  if not set then return nil, comp end
  local p = set.network
  -- the composition's e2b plugin: its allowInternetAccess, whether anything enforces the policy
  local internet, internet_where = p.internet, policies.origin_text(set.origins.network.internet)
  local enforced, host_plugins = true, nil
  if comp then
    local e2b
    for _, rec in ipairs(comp.plugins) do if rec.provides == "e2b" then e2b = rec end end
    if not e2b then
      enforced = false
      host_plugins = {}
      for _, rec in ipairs(comp.plugins) do host_plugins[#host_plugins + 1] = rec.name end
    elseif e2b.given.allowInternetAccess ~= nil then
      internet, internet_where = e2b.config.allowInternetAccess, e2b.where .. " (plugin \"e2b\" allowInternetAccess)"
    end
  end
  local rules, rerr = egress().parse{ internet = internet, allowOut = p.allow_out, denyOut = p.deny_out,
    unblock = opts["--unblock"] }
  if not rules then return nil, rerr end
  local dns_all = rules:dns_allowed("moonbox-probe.invalid")
  local function resolved_by(name)
    if fixed[name] then local l = array(fixed[name]); l.from = "--resolve" return l end
    return resolve(name)
  end
  local results = {}
  mb.run(function()
    for k, c in ipairs(checks) do
      results[k] = explain(p, rules, c, resolved_by)
      results[k].headers = headers_for(p, results[k], c)
    end
  end)
  local status = 0
  for _, r in ipairs(results) do if r.verdict ~= "allow" then status = 1 end end
  local layers = cli.layers_text(set)
  local function list(field)
    local out = array()
    for k, e in ipairs(p[field]) do out[k] = { entry = e, where = p.where(policies.kinds.network.LIST[field], k) } end
    return out
  end
  if opts["--json"] then
    local items = array()
    for k, r in ipairs(results) do
      r.addresses = array(r.addresses)
      items[k] = r
    end
    local rl = array()
    local keys = {}
    for k in pairs(p.rules) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local hs = array()
      for _, h in ipairs(R.headers({ [k] = p.rules[k] })) do
        local e = { name = h.header, secret = h.secret, fromEnv = h.fromEnv, format = h.format }
        if h.fromEnv then e.setHere = (os.getenv(h.fromEnv) or "") ~= "" end
        hs[#hs + 1] = e
      end
      rl[#rl + 1] = { host = k, where = p.rule_where(k), headers = hs }
    end
    io.stdout:write(encode({ policy = layers, enforced = enforced, hostPlugins = host_plugins and array(host_plugins),
      internet = { value = internet, where = internet_where },
      allowOut = list("allow_out"), denyOut = list("deny_out"), rules = rl, unblock = array(opts["--unblock"]),
      dns = dns_all and "every name" or "names allow_out names", checks = items, allowed = status == 0 }), "\n")
    return status
  end
  local out = {}
  local function say(fmt, ...) out[#out + 1] = fmt:format(...) end
  say("network policy: %s", layers)
  if enforced then
    say("enforced outside the sandbox by sandboxd (or E2B), sent with each sandbox the e2b plugin creates")
  else
    say("NOT enforced: %s runs on the host providers (%s); their programs reach whatever the host reaches",
      opts["--compose"], table.concat(host_plugins, ", "))
  end
  local w = 12
  for _, f in ipairs({ "allow_out", "deny_out" }) do
    for k in ipairs(p[f]) do w = math.max(w, #("%s[%d]"):format(f, k)) end
  end
  local ew = 18
  for _, f in ipairs({ "allow_out", "deny_out" }) do for _, e in ipairs(p[f]) do ew = math.max(ew, #e) end end
  local hosts = {}
  for k in pairs(p.rules) do hosts[#hosts + 1] = k; ew = math.max(ew, #k) end
  table.sort(hosts)
  local row = "  %-" .. w .. "s  %-" .. ew .. "s  %s"
  say(row, "internet", internet and "on" or "off", internet_where)
  for _, f in ipairs({ "allow_out", "deny_out" }) do
    if #p[f] == 0 then say(row, f, "(none)", policies.origin_text(set.origins.network[f])) end
    for k, e in ipairs(p[f]) do say(row, ("%s[%d]"):format(f, k), e, p.where(policies.kinds.network.LIST[f], k)) end
  end
  local unset = {}
  for _, k in ipairs(hosts) do
    say(row, "rules", k, p.rule_where(k) or "?")
    for _, h in ipairs(R.headers({ [k] = p.rules[k] })) do
      say("  %-" .. w .. "s    %s: %s", "", h.header, R.header_text(h))
      if h.fromEnv and (os.getenv(h.fromEnv) or "") == "" then unset[h.fromEnv] = true end
    end
  end
  if #hosts > 0 then
    say("header values never enter the sandbox: the egress proxy (sandboxd's or E2B's) sets them on HTTP (80) and HTTPS")
    say("  (443) requests to these hosts; <secret NAME> is in the endpoint's secret store (moonbox secret set NAME),")
    say("  <host variable V> is read when a sandbox starts and sent as a secret for that sandbox alone")
    local names = {}
    for v in pairs(unset) do names[#names + 1] = v end
    table.sort(names)
    for _, v in ipairs(names) do say("  %s is not set here: a sandbox with this policy would not start", v) end
  end
  if #(opts["--unblock"] or {}) > 0 then
    say("  as if sandboxd ran with --egress-unblock %s", table.concat(opts["--unblock"], " --egress-unblock "))
  end
  say("DNS in the sandbox: %s", dns_all and "answers every name"
    or "answers only the names allow_out names (a name it may never reach cannot be looked up)")
  say("safe defaults (sandboxd's, over every rule):")
  say("  never: loopback, unspecified, multicast, broadcast, reserved and the host's own addresses")
  say("  link-local (169.254.0.0/16, fe80::/10, instance metadata): refused unless sandboxd runs with --egress-unblock link-local")
  say("  private and shared (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7): refused unless allow_out names an")
  say("    address or CIDR inside them (not 0.0.0.0/0, not a name) or sandboxd runs with --egress-unblock private")
  say("  a host name decides TCP 80 (Host header) and 443 (TLS SNI) only; other ports and UDP by address")
  for _, r in ipairs(results) do
    say("")
    say("%s  (%s %d, decided by %s)", r.check, r.proto, r.port, r.by == "name" and ("the name " .. r.host) or "address")
    if r.dns ~= nil then
      say("  DNS in the sandbox: %s", r.dns and ("answers " .. r.host) or ("refuses " .. r.host .. " (no allow_out name matches it)"))
    end
    if r.resolve_error then
      say("  not resolved here (%s)%s", r.resolve_error,
        r.by_name and "" or (": decided by the addresses " .. r.host .. " resolves to"))
      if r.by_name then
        say("  by name: %s[%d] %q (%s), for each of its addresses the safe defaults allow", r.by_name.field,
          r.by_name.index, r.by_name.entry, r.by_name.where or "?")
      end
    elseif r.resolved then
      say("  %s resolves to %s (%s)", r.host, #r.addresses > 0 and ("%d address%s"):format(#r.addresses, #r.addresses == 1 and "" or "es")
        or "nothing", r.resolved == "host" and "the host's resolver" or r.resolved)
    end
    local aw = 15
    for _, a in ipairs(r.addresses) do aw = math.max(aw, #a.addr) end
    for _, a in ipairs(r.addresses) do
      local v = a.verdict == "allow-name" and "allow" or a.verdict
      say("  %-" .. aw .. "s  %-5s  %s", a.addr, v, verdict_line(a))
    end
    say("  => %s", r.verdict == "allow" and "allowed"
      or r.verdict == "deny" and (r.dns == false and "denied: the sandbox cannot look the name up" or "denied")
      or ("cannot be decided here without its addresses (--resolve %s=ADDR)"):format(r.host))
    local hd = r.headers
    if hd and hd.rule then
      say("  headers%s, by rules[%q] (%s):", r.verdict == "allow" and "" or " (if it were allowed)", hd.rule, hd.where or "?")
      for _, h in ipairs(hd.headers) do say("    %s: %s", h.name, h.text) end
    elseif hd then
      say("  headers: none (%s)", hd.why)
    end
  end
  io.stdout:write(table.concat(out, "\n"), "\n")
  return status
end

return M
