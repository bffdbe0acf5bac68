-- moonbox.policy.network — the network policy: its fields, each entry checked by sandboxd's own
-- parser (core.egress, sandboxd/egress_rules.c), and the rules bound onto the merged values.
--
-- Values come from policies/network.lua merged with the user's files (moonbox.policies): a field
-- a file sets replaces the default (a list is replaced whole; extend one with
-- `allow_out = { "x.io", table.unpack(defaults.allow_out) }`). bind() puts on the merged table:
--   p.is_default()            internet on, no allow_out, no deny_out (what E2B does without options)
--   p.options()               → { allowInternetAccess, allowOut, denyOut } (copies, the SDK's names:
--                               what ctx.e2b:updateNetwork takes)
--   p.rules{ unblock }        → core.egress rules | nil, err (unblock: sandboxd's --egress-unblock)
--   p.where(list, i)          → file:line of entry i of "allowOut"/"denyOut" (or of the field)
--   p.decide(dest, rules)     → core.egress's decision + field ("allow_out"/"deny_out") and where
--   p.summary()               → one line: "internet off; allow_out pypi.org; deny_out 0.0.0.0/0"
local S = require "moonbox.policy.schema"

local M = { name = "network" }

local function egress() return require("moonbox.core").egress end

M.MAX_ENTRIES = 512          -- per list, as sandboxd (EGRESS_MAX_ENTRIES)

-- One entry of `list` (E2B's name), checked alone by sandboxd's parser.
local function entry(list, expected)
  return S.string{ expected = expected, valid = function(v)
    local _, err = egress().parse{ [list] = { v } }
    if err then return err.reason or err.message end
  end }
end

M.fields = { "internet", "allow_out", "deny_out" }
M.schema = {
  internet = S.boolean{ doc = "internet access (allow_internet_access); false: only allow_out is reached" },
  allow_out = S.list(entry("allowOut", "an address, a CIDR, a host name or a *.wildcard"),
    { doc = "always allowed (allowOut); wins over deny_out" }),
  deny_out = S.list(entry("denyOut", "an address or a CIDR"),
    { doc = "denied unless allow_out allows it (denyOut); 0.0.0.0/0 is all traffic" }),
}

-- Rules between fields (and over each list): → nil | message, the fields involved
function M.check(v)
  for _, f in ipairs({ "allow_out", "deny_out" }) do
    if #v[f] > M.MAX_ENTRIES then
      return ("at most %d entries (sandboxd's limit), got %d"):format(M.MAX_ENTRIES, #v[f]), { f }
    end
  end
end

-- E2B's list names and the policy's field names.
M.FIELD = { allowOut = "allow_out", denyOut = "deny_out" }
M.LIST = { allow_out = "allowOut", deny_out = "denyOut" }

local function copy(list) local out = {} for i, x in ipairs(list) do out[i] = x end return out end

function M.bind(p, origins)
  origins = origins or {}
  local cached

  function p.is_default()
    return p.internet == true and #p.allow_out == 0 and #p.deny_out == 0
  end

  function p.options()
    return { allowInternetAccess = p.internet, allowOut = copy(p.allow_out), denyOut = copy(p.deny_out) }
  end

  -- The parsed rules (what sandboxd would enforce). opts.unblock: as sandboxd's --egress-unblock.
  function p.rules(opts)
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
    rules = rules or assert(p.rules())
    local d = rules:decide(dest)
    if d.list then d.field, d.where = M.FIELD[d.list], p.where(d.list, d.index) end
    return d
  end

  function p.summary()
    local parts = { "internet " .. (p.internet and "on" or "off") }
    for _, f in ipairs({ "allow_out", "deny_out" }) do
      if #p[f] > 0 then parts[#parts + 1] = f .. " " .. table.concat(p[f], ", ") end
    end
    return table.concat(parts, "; ")
  end
  return p
end

return M
