-- moonbox.policy.rules — the network policy's per-host rules: request headers that sandboxd's
-- egress proxy (or E2B's) sets on the way out, whose values come from the secret store or from a
-- host variable and never enter the sandbox.
--
--   rules = {
--     ["api.github.com"] = { headers = { Authorization = { secret = "github-token", format = "Bearer %s" } } },
--     ["*.npmjs.org"]    = { headers = { Authorization = { fromEnv = "NPM_TOKEN", format = "Bearer %s" } } },
--   }
--
-- A host is a name or a `*.example.com` wildcard (subdomains at any depth, never the apex), read
-- as sandboxd reads names (core.egress.hostname). Each header takes exactly one of `secret`
-- (a name in the secret store: `moonbox secret set NAME`) or `fromEnv` (a host variable, read
-- when the sandbox starts and sent as a secret for that sandbox only), and `format` (one `%s`
-- where the value goes, `%%` for a percent sign; default "%s"). There are no literal values: what
-- a policy file holds is shown by `moonbox policy network` and dump-config, and goes to the
-- server in the clear. On the wire (E2B's `network.rules`) a header's value is the format with
-- `${e2b.secrets.NAME}` in place of `%s`.
--
-- Which rule applies to a request: the host's exact rule, else the wildcard with the longest
-- suffix that matches (E2B's precedence; rule sets are not merged).
local S = require "moonbox.policy.schema"
local core = require "moonbox.core"

local M = {}

M.HOST_FIELDS = { "headers" }
M.VALUE_FIELDS = { "secret", "fromEnv", "format" }
M.MAX_FORMAT = 1024
-- Headers that frame or route the request, or belong to one hop: a rule may not set them.
M.REFUSED = { host = true, ["content-length"] = true, ["transfer-encoding"] = true, connection = true,
  ["keep-alive"] = true, ["proxy-connection"] = true, te = true, trailer = true, upgrade = true }

local function egress() return core.egress end

local sorted_keys = S.sorted_keys

local function path_part(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return "." .. k end
  return "[" .. S.show(k) .. "]"
end
M.path_part = path_part

-- A host key → normalized name (lower-case, "*." kept), wildcard | nil, why
function M.host(key)
  if type(key) ~= "string" then return nil, ("expected a host name or a *.wildcard, got %s"):format(type(key)) end
  local name, wild = egress().hostname(key)
  if not name then return nil, wild.message end
  return name, wild
end

-- E2B's rules for a secret name (the SDK's Secret.fill; lower-case, as E2B stores names).
-- → nil | why
function M.secret_name_error(name)
  if type(name) ~= "string" then return ("expected a secret name, got %s"):format(type(name)) end
  if name == "" then return "an empty secret name" end
  if name:find("[%z\1-\31\127{}]") or name:find("\194[\128-\159]") then
    return ("%s cannot be a secret name: no '{', '}' or control characters (it goes into ${e2b.secrets.NAME})"):format(S.show(name))
  end
  if name:find("%u") then
    return ("%s: secret names are lower-case (E2B stores them lower-cased): write %s"):format(S.show(name), S.show(name:lower()))
  end
  if name:sub(1, 4) == "sec_" then return ("%s: the sec_ prefix is reserved for secret ids"):format(S.show(name)) end
  return nil
end

-- The placeholder the egress proxy replaces with the secret's value.
function M.placeholder(name) return "${e2b.secrets." .. name .. "}" end

-- A header value's format → nil | why
local function format_error(f)
  if type(f) ~= "string" then return ("format: expected a string with one %%s, got %s"):format(type(f)) end
  if #f > M.MAX_FORMAT then return ("format: at most %d bytes, got %d"):format(M.MAX_FORMAT, #f) end
  if f:find("[%z\1-\8\10-\31\127]") then return "format: a header value cannot hold control characters" end
  if f:find("${", 1, true) then return ("format %s: no ${...} placeholders (name the secret with secret = NAME)"):format(S.show(f)) end
  local n, i = 0, 1
  while true do
    local at = f:find("%", i, true)
    if not at then break end
    local c = f:sub(at + 1, at + 1)
    if c == "s" then n = n + 1
    elseif c ~= "%" then return ("format %s: only %%s (the value) and %%%% (a percent sign)"):format(S.show(f)) end
    i = at + 2
  end
  if n ~= 1 then return ("format %s: expected exactly one %%s (where the value goes), found %d"):format(S.show(f), n) end
  return nil
end
M.format_error = format_error

-- An HTTP field name → nil | why
local function header_name_error(h)
  if type(h) ~= "string" then return ("expected a header name, got %s"):format(type(h)) end
  if not h:match("^[%w!#$%%&'*+%-.^_`|~]+$") then return ("%s is not a header name"):format(S.show(h)) end
  if M.REFUSED[h:lower()] then
    return ("%s frames or routes the request (a rule may not set Host, Content-Length, Transfer-Encoding "
      .. "or the hop-by-hop headers)"):format(S.show(h))
  end
end

local function unknown(k, fields, what)
  local near = type(k) == "string" and S.nearest(k, fields)
  return ("unknown field %s in %s (expected %s%s)"):format(type(k) == "string" and k or S.show(k), what,
    table.concat(fields, ", "), near and ("; the nearest is " .. near) or "")
end

-- One host's entry { headers = { NAME = { secret | fromEnv, format } } }.
-- → nil | message (beginning with the path inside the entry), kind ("shape": a wrong field or
--   type, a programming mistake in Lua; "value": a name, a header or a format that cannot be)
function M.check_entry(v)
  if type(v) ~= "table" then
    return ("expected { headers = { NAME = { secret = ... } | { fromEnv = ... } } }, got %s"):format(type(v)), "shape"
  end
  for _, k in ipairs(sorted_keys(v)) do
    if k ~= "headers" then return unknown(k, M.HOST_FIELDS, "a host's rule"), "shape" end
  end
  local hs = v.headers
  if type(hs) ~= "table" then return ("headers: expected a table of NAME = { secret = ... }, got %s"):format(type(hs)), "shape" end
  if next(hs) == nil then return "headers: empty (a rule sets at least one header)", "value" end
  local seen = {}
  for _, h in ipairs(sorted_keys(hs)) do
    local at = "headers" .. path_part(h)
    local bad = header_name_error(h)
    if bad then return ("headers: %s"):format(bad), type(h) == "string" and "value" or "shape" end
    if seen[h:lower()] then return ("%s: the same header as %s (names are case-insensitive)"):format(at, S.show(seen[h:lower()])), "value" end
    seen[h:lower()] = h
    local spec = hs[h]
    if type(spec) ~= "table" then
      return ("%s: expected { secret = NAME } or { fromEnv = VAR } (with format = \"Bearer %%s\"), got %s%s"):format(at,
        type(spec), type(spec) == "string" and " (literal values are not taken: put the value in a secret)" or ""), "shape"
    end
    for _, k in ipairs(sorted_keys(spec)) do
      if k ~= "secret" and k ~= "fromEnv" and k ~= "format" then return at .. ": " .. unknown(k, M.VALUE_FIELDS, "a header"), "shape" end
    end
    if (spec.secret == nil) == (spec.fromEnv == nil) then
      return ("%s: give exactly one of secret = NAME (the secret store) or fromEnv = VAR (a host variable)"):format(at), "shape"
    end
    if spec.secret ~= nil then
      if type(spec.secret) ~= "string" then return ("%s.secret: expected a secret name, got %s"):format(at, type(spec.secret)), "shape" end
      bad = M.secret_name_error(spec.secret)
      if bad then return ("%s.secret: %s"):format(at, bad), "value" end
    else
      if type(spec.fromEnv) ~= "string" then return ("%s.fromEnv: expected a variable name, got %s"):format(at, type(spec.fromEnv)), "shape" end
      bad = S.name_error(spec.fromEnv)
      if bad then return ("%s.fromEnv: %s"):format(at, bad), "value" end
    end
    if spec.format ~= nil then
      bad = format_error(spec.format)
      if bad then return ("%s.%s"):format(at, bad), type(spec.format) == "string" and "value" or "shape" end
    end
  end
  return nil
end

-- A whole rules table (updateNetwork's `rules`). → nil | message (naming rules["host"]...), kind
function M.check(rules)
  if type(rules) ~= "table" then return ("rules: expected a table of host = { headers = ... }, got %s"):format(type(rules)), "shape" end
  local hosts = {}
  for _, k in ipairs(sorted_keys(rules)) do
    local name, why = M.host(k)
    if not name then return ("rules key %s: %s"):format(S.show(k), why), type(k) == "string" and "value" or "shape" end
    if hosts[name] then
      return ("rules[%s]: the same host as rules[%s]"):format(S.show(k), S.show(hosts[name])), "value"
    end
    hosts[name] = k
    local msg, kind = M.check_entry(rules[k])
    if msg then
      return ("rules[%s]%s%s"):format(S.show(k), msg:match("^headers") and "." or ": ", msg), kind
    end
  end
  return nil
end

-- Two keys naming the same host ("API.example.com", "api.example.com") → message, key | nil
function M.duplicate(rules)
  local hosts = {}
  for _, k in ipairs(sorted_keys(rules)) do
    local name = M.host(k)
    if name and hosts[name] then return ("the same host as rules[%s]"):format(S.show(hosts[name])), k end
    if name then hosts[name] = k end
  end
end

-- The header's value as it goes on the wire: format with the placeholder of `secret_name`.
local function wire_value(spec, secret_name)
  local f = spec.format or "%s"
  local ph = M.placeholder(secret_name)
  return (f:gsub("%%(.)", function(c) if c == "s" then return ph end return c end))
end
M.wire_value = wire_value

-- E2B's `network.rules` from checked rules. env_secret(var) → the name of the secret made for
-- that variable. → { [host] = { { transform = { headers = { NAME = value } } } } } (hosts
-- normalized as sandboxd reads them)
function M.wire(rules, env_secret)
  local out = {}
  for _, k in ipairs(sorted_keys(rules)) do
    local headers = {}
    for h, spec in pairs(rules[k].headers) do
      headers[h] = wire_value(spec, spec.secret or env_secret(spec.fromEnv))
    end
    out[(M.host(k))] = { { transform = { headers = headers } } }
  end
  return out
end

-- The rule for a request to `host` (a name): its exact rule, else the matching wildcard with the
-- longest suffix. → key, entry | nil
function M.match(rules, host)
  local h = M.host(host)
  if not h or h:sub(1, 2) == "*." then return nil end
  local best, best_len
  for k, v in pairs(rules) do
    local n = M.host(k)
    if n == h then return k, v end
    if n and n:sub(1, 2) == "*." then
      local suffix = n:sub(2)                      -- ".example.com"
      if #h > #suffix and h:sub(-#suffix) == suffix and (not best_len or #suffix > best_len) then
        best, best_len = k, #suffix
      end
    end
  end
  if best then return best, rules[best] end
  return nil
end

-- A header's value as people read it, never a value: `Bearer <secret github-token>`.
function M.header_text(spec)
  local src = spec.secret and ("<secret " .. spec.secret .. ">") or ("<host variable " .. spec.fromEnv .. ">")
  return ((spec.format or "%s"):gsub("%%(.)", function(c) if c == "s" then return src end return c end))
end

-- Every header of every rule, sorted by host then header: { host, header, secret | fromEnv, format }
function M.headers(rules)
  local out = {}
  for _, k in ipairs(sorted_keys(rules)) do
    for _, h in ipairs(sorted_keys(rules[k].headers)) do
      local spec = rules[k].headers[h]
      out[#out + 1] = { host = k, header = h, secret = spec.secret, fromEnv = spec.fromEnv, format = spec.format or "%s" }
    end
  end
  return out
end

-- Does an allow_out entry reach some request a rule for `key` applies to, by name?
local function covers(entry, key)
  local e = M.host(entry)
  local k = M.host(key)
  if not e or not k then return false end
  local ew, kw = e:sub(1, 2) == "*.", k:sub(1, 2) == "*."
  local function under(a, b) return #a > #b + 1 and a:sub(-(#b + 1)) == "." .. b end   -- a is a subdomain of b
  if not kw then
    if not ew then return e == k end
    return under(k, e:sub(3))
  end
  local r = k:sub(3)
  if not ew then return under(e, r) end
  local x = e:sub(3)
  return x == r or under(r, x) or under(x, r)
end
M.covers = covers

-- Rules no request can ever use: the policy is closed (internet off, or deny_out holds
-- 0.0.0.0/0) and no allow_out name reaches the rule's host (a rule does not allow a destination
-- by itself, as on E2B). A host allow_out reaches only by address counts as unused: name it.
-- → list of { key, why } (sorted by key)
function M.unused(rules, internet, allow_out, deny_out)
  local closed_by
  if internet == false then closed_by = "internet is off"
  else
    for i, e in ipairs(deny_out or {}) do
      if e:match("^%s*0%.0%.0%.0/0%s*$") then closed_by = ("deny_out[%d] is 0.0.0.0/0"):format(i) break end
    end
  end
  if not closed_by then return {} end
  local out = {}
  for _, k in ipairs(sorted_keys(rules)) do
    local reached = false
    for _, e in ipairs(allow_out or {}) do if covers(e, k) then reached = true break end end
    if not reached then out[#out + 1] = { key = k, why = closed_by } end
  end
  return out
end

return M
