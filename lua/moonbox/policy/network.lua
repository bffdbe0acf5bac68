-- moonbox.policy.network — the network policy: its fields, each entry checked by sandboxd's own
-- parser (core.egress, sandboxd/egress_rules.c), and the rules bound onto the merged values.
--
-- Values come from policies/network.lua merged with the user's files (moonbox.policies): a field
-- a file sets replaces the default (a list is replaced whole; extend one with
-- `allow_out = { "x.io", table.unpack(defaults.allow_out) }`). bind() puts on the merged table:
--   p.is_default()            internet on, no allow_out, no deny_out, no rules (what E2B does without options)
--   p.options()               → { allowInternetAccess, allowOut, denyOut, rules } (copies, the SDK's
--                               names: what ctx.e2b:updateNetwork takes)
--   p.egress{ unblock }       → core.egress rules | nil, err (unblock: sandboxd's --egress-unblock)
--   p.where(list, i)          → file:line of entry i of "allowOut"/"denyOut" (or of the field)
--   p.decide(dest, rules)     → core.egress's decision + field ("allow_out"/"deny_out") and where
--   p.summary()               → one line: "internet off; allow_out pypi.org; deny_out 0.0.0.0/0"
--   p.rule_for(host)          → key, entry, where of the rule a request to host gets | nil
--   p.rule_where(key)         → file:line of rules[key]
-- `rules` (per-host request headers from the secret store or a host variable) are checked by
-- moonbox.policy.rules; a rule no request could use (the policy closed, no allow_out name reaching
-- its host) is refused.
local S = require "moonbox.policy.schema"
local R = require "moonbox.policy.rules"
local core = require "moonbox.core"

local M = { name = "network" }

local function egress() return core.egress end

M.MAX_ENTRIES = 512          -- per list, as sandboxd (EGRESS_MAX_ENTRIES)

-- One entry of `list` (E2B's name), checked alone by sandboxd's parser.
local function entry(list, expected)
  return S.string{ expected = expected, valid = function(v)
    local _, err = egress().parse{ [list] = { v } }
    if err then return err.reason or err.message end
  end }
end

M.fields = { "internet", "allow_out", "deny_out", "rules" }
M.schema = {
  internet = S.boolean{ doc = "internet access (allow_internet_access); false: only allow_out is reached" },
  allow_out = S.list(entry("allowOut", "an address, a CIDR, a host name or a *.wildcard"),
    { doc = "always allowed (allowOut); wins over deny_out" }),
  deny_out = S.list(entry("denyOut", "an address or a CIDR"),
    { doc = "denied unless allow_out allows it (denyOut); 0.0.0.0/0 is all traffic" }),
  rules = S.map(S.string{ expected = "a host name or a *.wildcard", valid = function(v)
      local name, why = R.host(v)
      if not name then return why end
    end },
    S.custom{ expected = "{ headers = { NAME = { secret = S | fromEnv = V, format = F } } }",
      check = function(v) return (R.check_entry(v)) end },
    { doc = "request headers the egress proxy sets per host, from a secret or a host variable (network.rules)" }),
}

-- Rules between fields (and over each list): → nil | message, the fields involved, the map key
-- the message is about (its line is named)
function M.check(v)
  for _, f in ipairs({ "allow_out", "deny_out" }) do
    if #v[f] > M.MAX_ENTRIES then
      return ("at most %d entries (sandboxd's limit), got %d"):format(M.MAX_ENTRIES, #v[f]), { f }
    end
  end
  local dup, key = R.duplicate(v.rules)
  if dup then return dup, { "rules" }, key end
  local unused = R.unused(v.rules, v.internet, v.allow_out, v.deny_out)[1]
  if unused then
    return M.unused_text(unused), { "rules", "allow_out" }, unused.key
  end
end

-- "never used: ..." for an entry of R.unused (said of rules[key])
function M.unused_text(u)
  return ("never used: %s and no allow_out name reaches %s (a rule does not allow a destination by itself): "
    .. "add %s to allow_out"):format(u.why, u.key, S.show(u.key))
end

-- E2B's list names and the policy's field names.
M.FIELD = { allowOut = "allow_out", denyOut = "deny_out" }
M.LIST = { allow_out = "allowOut", deny_out = "denyOut" }

local function copy(list) local out = {} for i, x in ipairs(list) do out[i] = x end return out end

function M.bind(p, origins)
  origins = origins or {}
  local cached

  function p.is_default()
    return p.internet == true and #p.allow_out == 0 and #p.deny_out == 0 and next(p.rules) == nil
  end

  function p.options()
    return { allowInternetAccess = p.internet, allowOut = copy(p.allow_out), denyOut = copy(p.deny_out),
      rules = S.copy(p.rules) }
  end

  -- Where rules[key] was written.
  function p.rule_where(key)
    local o = origins.rules or {}
    return (o.items and o.items[key]) or o.where
  end

  -- The rule a request to `host` gets (exact, else the longest matching wildcard).
  function p.rule_for(host)
    local key, entry = R.match(p.rules, host)
    if key then return key, entry, p.rule_where(key) end
    return nil
  end

  -- The parsed rules (what sandboxd would enforce). opts.unblock: as sandboxd's --egress-unblock.
  function p.egress(opts)
    local unblock = opts and opts.unblock
    if unblock == nil and cached then return cached end
    local r, err = egress().parse{ internet = p.internet, allowOut = p.allow_out, denyOut = p.deny_out, unblock = unblock }
    if r and unblock == nil then cached = r end
    return r, err
  end

  -- Where entry i of E2B's list `list` ("allowOut"/"denyOut") was written.
  function p.where(list, i)
    local o = origins[M.FIELD[list] or list] or {}
    return (i and o.items and o.items[i]) or o.where
  end

  -- core.egress's decision for dest, with the policy's field and where the entry was written.
  function p.decide(dest, rules)
    rules = rules or assert(p.egress())
    local d = rules:decide(dest)
    if d.list then d.field, d.where = M.FIELD[d.list], p.where(d.list, d.index) end
    return d
  end

  function p.summary()
    local parts = { "internet " .. (p.internet and "on" or "off") }
    for _, f in ipairs({ "allow_out", "deny_out" }) do
      if #p[f] > 0 then parts[#parts + 1] = f .. " " .. table.concat(p[f], ", ") end
    end
    local hosts = {}
    for k in pairs(p.rules) do hosts[#hosts + 1] = k end
    table.sort(hosts)
    if #hosts > 0 then parts[#parts + 1] = "rules " .. table.concat(hosts, ", ") end
    return table.concat(parts, "; ")
  end
  return p
end

return M
