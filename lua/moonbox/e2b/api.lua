-- moonbox.e2b.api — the E2B control plane (REST JSON, X-API-KEY) on mb.http.
-- Wire shapes follow the E2B OpenAPI spec as the official SDK sends them (reference §2).
-- Errors: E2B_NOT_FOUND / E2B_CONFLICT come from the JSON body's `code` (as the SDK decides),
-- falling back to the HTTP status when the body has none; E2B_UNAUTHORIZED, E2B_RATE_LIMITED,
-- else E2B_HTTP with `status`. Transport errors pass through unchanged.
local cjson = require("cjson").new()
local errors = require "moonbox.errors"
local http = require "moonbox.http"


local api = {}
api.__index = api

api.USER_AGENT = "moonbox/0.1"
local MAX_BODY = 4 * 1024 * 1024

local function urlencode(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end
api.urlencode = urlencode

-- cfg: { url (E2B_API_URL), api_key, access_token?, http (mb.http-like), timeout_ms, create_timeout_ms,
--        transport = { ca_file, connect_to } }
function api.new(cfg)
  assert(type(cfg.url) == "string" and cfg.url ~= "", "api: url required")
  local self = setmetatable({}, api)
  self.url = cfg.url:gsub("/+$", "")
  self.api_key = cfg.api_key
  self.access_token = cfg.access_token
  self.http = cfg.http or http
  self.timeout_ms = cfg.timeout_ms or 60000
  self.create_timeout_ms = cfg.create_timeout_ms or self.timeout_ms
  self.transport = cfg.transport or {}
  return self
end

local function decode(body)
  if body == nil or body == "" then return nil end
  local ok, v = pcall(cjson.decode, body)
  if ok then return v end
  return nil
end

local function null_to_nil(v) if v == cjson.null then return nil end return v end

function api:_request(method, path, body, timeout_ms)
  local headers = { ["User-Agent"] = api.USER_AGENT }
  if self.api_key then headers["X-API-KEY"] = self.api_key end
  if self.access_token then headers["Authorization"] = "Bearer " .. self.access_token end
  local payload
  if type(body) == "string" then         -- JSON text already (e.g. a list that may be empty)
    payload = body
    headers["Content-Type"] = "application/json"
  elseif body ~= nil then
    payload = cjson.encode(body)
    headers["Content-Type"] = "application/json"
  elseif method == "POST" then
    payload = ""
  end
  local res, err = self.http.request{
    method = method, url = self.url .. path, headers = headers, body = payload,
    max_bytes = MAX_BODY, timeout_ms = timeout_ms or self.timeout_ms,
    ca_file = self.transport.ca_file, connect_to = self.transport.connect_to,
  }
  if not res then return nil, err end
  if res.status >= 200 and res.status < 300 then return res end
  local b = decode(res.body)
  local code = type(b) == "table" and math.tointeger(b.code) or nil
  local msg = type(b) == "table" and type(b.message) == "string" and b.message
    or (res.body ~= "" and res.body) or ("HTTP " .. res.status)
  local which = code or res.status
  local fields = { status = res.status, body_code = code }
  local text = ("%s %s: %d: %s"):format(method, path, res.status, msg)
  if which == 404 then return nil, errors.new("E2B_NOT_FOUND", text, fields) end
  if which == 409 then return nil, errors.new("E2B_CONFLICT", text, fields) end
  if res.status == 401 then return nil, errors.new("E2B_UNAUTHORIZED", text, fields) end
  if res.status == 429 then return nil, errors.new("E2B_RATE_LIMITED", text, fields) end
  return nil, errors.new("E2B_HTTP", text, fields)
end

local function json_body(res)
  local v = decode(res.body)
  if type(v) ~= "table" then
    return nil, errors.new("E2B_PROTOCOL", "control plane returned a non-JSON body", { status = res.status })
  end
  return v
end

-- A header value of a sandbox's rules as moonbox shows it: placeholders as `<secret NAME>`; a
-- value with text beyond a scheme word around its placeholders ("Bearer ", "token ") is hidden
-- (the SDK can send literal values, and a literal may be a credential).
local function shown_header(v)
  if type(v) ~= "string" then return "<hidden>" end
  local names = {}
  local rest = v:gsub("%${e2b%.([%w_]+)%.([^}]*)}", function(kind, name)
    names[#names + 1] = (kind == "secrets" and "<secret %s>" or "<" .. kind .. " %s>"):format(name)
    return "\0"
  end)
  if #names == 0 or not rest:gsub("%z", ""):match("^%a* *$") then return ("<hidden: %d bytes>"):format(#v) end
  local i = 0
  return (rest:gsub("%z", function() i = i + 1 return names[i] end))
end
api.shown_header = shown_header

-- E2B's network.rules as moonbox shows them (shape kept, header values through shown_header)
function api.rules_view(rules)
  if type(rules) ~= "table" then return nil end
  local out = {}
  for host, list in pairs(rules) do
    local l = {}
    for i, r in ipairs(type(list) == "table" and list or {}) do
      local hs = type(r) == "table" and type(r.transform) == "table" and type(r.transform.headers) == "table"
        and r.transform.headers or {}
      local shown = {}
      for h, x in pairs(hs) do shown[h] = shown_header(x) end
      l[i] = { transform = { headers = shown } }
    end
    out[host] = l
  end
  return out
end

-- A `Sandbox` / `SandboxDetail` / `ListedSandbox`: the fields moonbox uses, and the public view
-- (camelCase, as the SDK shows them).
local function sandbox_info(v)
  if type(v.sandboxID) ~= "string" or v.sandboxID == "" then
    return nil, errors.new("E2B_PROTOCOL", "control plane response lacks sandboxID")
  end
  local md = null_to_nil(v.metadata)
  local net = null_to_nil(v.network)
  local function list(l) l = type(net) == "table" and null_to_nil(net[l]) or nil return type(l) == "table" and l or {} end
  local token = null_to_nil(v.trafficAccessToken)
  if type(token) ~= "string" or token == "" then token = nil end
  local public_traffic
  if type(net) == "table" then public_traffic = null_to_nil(net.allowPublicTraffic) end
  if type(public_traffic) ~= "boolean" then public_traffic = nil end
  return {
    id = v.sandboxID, template = null_to_nil(v.templateID), envd_version = null_to_nil(v.envdVersion),
    access_token = null_to_nil(v.envdAccessToken), domain = null_to_nil(v.domain),
    traffic_token = token, state = null_to_nil(v.state), raw = v,
    public = { sandboxId = v.sandboxID, templateId = null_to_nil(v.templateID), name = null_to_nil(v.alias),
      metadata = type(md) == "table" and md or {}, state = null_to_nil(v.state),
      startedAt = null_to_nil(v.startedAt), endAt = null_to_nil(v.endAt), cpuCount = null_to_nil(v.cpuCount),
      memoryMB = null_to_nil(v.memoryMB), diskSizeMB = null_to_nil(v.diskSizeMB),
      envdVersion = null_to_nil(v.envdVersion), domain = null_to_nil(v.domain),
      -- the rules in force, as E2B materialises them (absent: none, internet as allowInternetAccess)
      network = { allowOut = list("allowOut"), denyOut = list("denyOut"),
        rules = api.rules_view(type(net) == "table" and null_to_nil(net.rules) or nil),
        allowPublicTraffic = public_traffic },
      allowInternetAccess = null_to_nil(v.allowInternetAccess),
      -- what the port proxy wants in e2b-traffic-access-token (allowPublicTraffic false)
      trafficAccessToken = token },
  }
end
api.sandbox_info = sandbox_info

-- A request answered by one Sandbox / SandboxDetail → info | nil, err
function api:_sandbox_request(method, path, body, timeout_ms)
  local res, err = self:_request(method, path, body, timeout_ms)
  if not res then return nil, err end
  local v, jerr = json_body(res)
  if not v then return nil, jerr end
  return sandbox_info(v)
end

local function seconds(ms) return math.ceil(ms / 1000) end

-- E2B's `network` object from { allowOut = {...}, denyOut = {...}, rules = { host → list },
-- allowPublicTraffic }: only the lists and rules that hold entries (an empty one means the same
-- as none, and cjson would write {} for it), allowPublicTraffic when given; nil when nothing is
-- left, so that a request without rules is the request older servers know.
function api.network_body(n)
  if n == nil then return nil end
  local body
  for _, k in ipairs({ "allowOut", "denyOut" }) do
    if n[k] and #n[k] > 0 then body = body or {}; body[k] = n[k] end
  end
  if n.rules and next(n.rules) ~= nil then body = body or {}; body.rules = n.rules end
  if n.allowPublicTraffic ~= nil then body = body or {}; body.allowPublicTraffic = n.allowPublicTraffic end
  return body
end

-- POST /sandboxes. opts: { template="base" (a template or a snapshot), timeout_ms=300000,
-- metadata, env_vars, secure=true, allow_internet_access=true, auto_pause=false,
-- network = { allowOut, denyOut, rules (E2B's shape), allowPublicTraffic } (network_body) }
function api:create(opts)
  opts = opts or {}
  local body = {
    templateID = opts.template or "base",
    metadata = opts.metadata,
    envVars = opts.env_vars,
    timeout = seconds(opts.timeout_ms or 300000),
    secure = opts.secure ~= false,
    allow_internet_access = opts.allow_internet_access ~= false,
    autoPause = opts.auto_pause == true,
    autoResume = { enabled = false },
    network = api.network_body(opts.network),
  }
  return self:_sandbox_request("POST", "/sandboxes", body, self.create_timeout_ms)
end

-- PUT /sandboxes/{id}/network { allowOut?, denyOut?, rules?, allow_internet_access? }: replaces
-- every rule at once (an omitted field is cleared). → true | nil, err (a 400 naming the entry:
-- E2B_INVALID_ARGUMENT; an unknown sandbox: E2B_NOT_FOUND)
function api:update_network(id, opts)
  local body = api.network_body(opts) or {}
  if opts.allow_internet_access ~= nil then body.allow_internet_access = opts.allow_internet_access end
  local res, err = self:_request("PUT", "/sandboxes/" .. urlencode(id) .. "/network", body)
  if res then return true end
  if err.code == "E2B_HTTP" and err.status == 400 then
    err = errors.new("E2B_INVALID_ARGUMENT", err.message, { status = err.status, body_code = err.body_code })
  end
  return nil, err
end

-- POST /sandboxes/{id}/connect {"timeout": s}: attach to a running (or paused) sandbox.
function api:connect(id, timeout_ms)
  return self:_sandbox_request("POST", "/sandboxes/" .. urlencode(id) .. "/connect",
    { timeout = seconds(timeout_ms or 300000) })
end

-- GET /sandboxes/{id}
function api:get(id)
  return self:_sandbox_request("GET", "/sandboxes/" .. urlencode(id))
end

-- DELETE /sandboxes/{id} → true (deleted) | false (not found: already gone) | nil, err
function api:delete(id)
  local res, err = self:_request("DELETE", "/sandboxes/" .. urlencode(id))
  if res then return true end
  if err.code == "E2B_NOT_FOUND" then return false end
  return nil, err
end

-- POST /sandboxes/{id}/timeout {"timeout": s}: the lease restarts from now.
function api:set_timeout(id, timeout_ms)
  local res, err = self:_request("POST", "/sandboxes/" .. urlencode(id) .. "/timeout",
    { timeout = seconds(timeout_ms) })
  if not res then return nil, err end
  return true
end

-- POST /sandboxes/{id}/pause → true | false (already paused) | nil, err
function api:pause(id)
  local res, err = self:_request("POST", "/sandboxes/" .. urlencode(id) .. "/pause")
  if res then return true end
  if err.code == "E2B_CONFLICT" then return false end
  return nil, err
end

-- GET /sandboxes/{id}/metrics[?start=&end=] (unix seconds) → list of
-- { timestamp, cpuUsedPct, cpuCount, memUsed, memTotal, memCache, diskUsed, diskTotal } | nil, err
function api:metrics(id, opts)
  opts = opts or {}
  local q = {}
  if opts.start then q[#q + 1] = "start=" .. math.tointeger(opts.start) end
  if opts["end"] then q[#q + 1] = "end=" .. math.tointeger(opts["end"]) end
  local res, err = self:_request("GET", "/sandboxes/" .. urlencode(id) .. "/metrics"
    .. (#q > 0 and ("?" .. table.concat(q, "&")) or ""))
  if not res then return nil, err end
  local v, jerr = json_body(res)
  if not v then return nil, jerr end
  local out = {}
  for i, m in ipairs(v) do
    out[i] = { timestamp = null_to_nil(m.timestamp), cpuUsedPct = null_to_nil(m.cpuUsedPct),
      cpuCount = null_to_nil(m.cpuCount), memUsed = null_to_nil(m.memUsed), memTotal = null_to_nil(m.memTotal),
      memCache = null_to_nil(m.memCache), diskUsed = null_to_nil(m.diskUsed), diskTotal = null_to_nil(m.diskTotal) }
  end
  return out
end

-- Unix milliseconds of an RFC 3339 time ("2026-12-03T06:28:19.368Z", "...+01:00"), or nil.
local function rfc3339_ms(t)
  if type(t) ~= "string" then return nil end
  local y, mo, d, h, mi, sec, frac, zone = t:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)[Tt ](%d%d):(%d%d):(%d%d)(%.?%d*)(.*)$")
  if not y then return nil end
  local off = 0
  if zone ~= "Z" and zone ~= "z" then
    local sign, oh, om = zone:match("^([+-])(%d%d):(%d%d)$")
    if not sign then return nil end
    off = (tonumber(oh) * 60 + tonumber(om)) * (sign == "+" and 1 or -1)
  end
  -- days since 1970-01-01 of a proleptic Gregorian date (the civil-from-days inverse)
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  if mo <= 2 then y = y - 1 end
  local era = y // 400
  local yoe = y - era * 400
  local doy = (153 * (mo + (mo > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  local days = era * 146097 + doe - 719468
  local ms = #frac > 1 and math.floor(tonumber("0" .. frac) * 1000 + 0.5) or 0
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi) - off) * 60000 + tonumber(sec) * 1000 + ms
end

-- GET /v2/sandboxes/{id}/logs[?cursor=&limit=&direction=] (cursor: Unix ms) → list of
-- { timestamp, timestampMs, level, message, fields } | nil, err
function api:logs(id, opts)
  opts = opts or {}
  local q = {}
  if opts.cursor then q[#q + 1] = "cursor=" .. math.tointeger(opts.cursor) end
  if opts.limit then q[#q + 1] = "limit=" .. math.tointeger(opts.limit) end
  if opts.direction then q[#q + 1] = "direction=" .. opts.direction end
  local res, err = self:_request("GET", "/v2/sandboxes/" .. urlencode(id) .. "/logs"
    .. (#q > 0 and ("?" .. table.concat(q, "&")) or ""))
  if not res then return nil, err end
  local v, jerr = json_body(res)
  if not v then return nil, jerr end
  if type(v) ~= "table" or type(v.logs) ~= "table" then
    return nil, errors.new("E2B_PROTOCOL", "logs: the answer has no 'logs' list")
  end
  local out = {}
  for i, e in ipairs(v.logs) do
    local fields = {}
    for k, x in pairs(type(e.fields) == "table" and e.fields or {}) do fields[k] = null_to_nil(x) end
    out[i] = { timestamp = null_to_nil(e.timestamp), timestampMs = rfc3339_ms(null_to_nil(e.timestamp)),
      level = null_to_nil(e.level), message = null_to_nil(e.message), fields = fields }
  end
  return out
end

-- POST /sandboxes/{id}/snapshots {name?} → { snapshotId, names } | nil, err
function api:snapshot(id, name)
  local res, err = self:_request("POST", "/sandboxes/" .. urlencode(id) .. "/snapshots",
    name and { name = name } or {}, self.create_timeout_ms)   -- cjson encodes {} as an object
  if not res then return nil, err end
  local v, jerr = json_body(res)
  if not v then return nil, jerr end
  if type(v.snapshotID) ~= "string" then return nil, errors.new("E2B_PROTOCOL", "snapshot response lacks snapshotID") end
  local names = type(v.names) == "table" and v.names or {}
  return { snapshotId = v.snapshotID, names = names }
end

-- GET /snapshots[?sandboxID=&limit=&nextToken=] → list of { snapshotId, names }, next_token | nil, err
function api:snapshots(opts)
  opts = opts or {}
  local q = {}
  if opts.sandbox_id then q[#q + 1] = "sandboxID=" .. urlencode(opts.sandbox_id) end
  if opts.limit then q[#q + 1] = "limit=" .. math.tointeger(opts.limit) end
  if opts.next_token then q[#q + 1] = "nextToken=" .. urlencode(opts.next_token) end
  local res, err = self:_request("GET", "/snapshots" .. (#q > 0 and ("?" .. table.concat(q, "&")) or ""))
  if not res then return nil, err end
  local v, jerr = json_body(res)
  if not v then return nil, jerr end
  local out = {}
  for i, item in ipairs(v) do
    out[i] = { snapshotId = null_to_nil(item.snapshotID), names = type(item.names) == "table" and item.names or {} }
  end
  local nt = res.headers and res.headers["x-next-token"]
  return out, (nt ~= "" and nt or nil)
end

-- DELETE /templates/{id} (a snapshot is a template) → true | false (not found) | nil, err
function api:delete_snapshot(id)
  local res, err = self:_request("DELETE", "/templates/" .. urlencode(id))
  if res then return true end
  if err.code == "E2B_NOT_FOUND" then return false end
  return nil, err
end

-- GET /v2/sandboxes → list of info, next_token | nil, err. opts: { state = {"running"}, limit,
-- next_token, metadata = {k = v} }
function api:list(opts)
  opts = opts or {}
  local q = {}
  if opts.metadata then
    local keys, parts = {}, {}
    for k in pairs(opts.metadata) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = urlencode(k) .. "=" .. urlencode(opts.metadata[k]) end
    q[#q + 1] = "metadata=" .. urlencode(table.concat(parts, "&"))
  end
  if opts.state then q[#q + 1] = "state=" .. table.concat(opts.state, ",") end
  if opts.limit then q[#q + 1] = "limit=" .. math.tointeger(opts.limit) end
  if opts.next_token then q[#q + 1] = "nextToken=" .. urlencode(opts.next_token) end
  local path = "/v2/sandboxes" .. (#q > 0 and ("?" .. table.concat(q, "&")) or "")
  local res, err = self:_request("GET", path)
  if not res then return nil, err end
  local v, jerr = json_body(res)
  if not v then return nil, jerr end
  local out = {}
  for i, item in ipairs(v) do out[i] = sandbox_info(item) or { raw = item } end
  local nt = res.headers and res.headers["x-next-token"]
  return out, (nt ~= "" and nt or nil)
end

------------------------------------------------------------------------------------------------
-- The secret store (/secrets). Values are write-only: they go in a request body and no answer
-- carries one. A `Secret` → the SDK's SecretInfo: { secretId, name, version, metadata,
-- createdAt, updatedAt } (times as the server writes them, RFC 3339).
local function secret_info(v)
  if type(v) ~= "table" or type(v.name) ~= "string" then
    return nil, errors.new("E2B_PROTOCOL", "control plane returned a secret without a name")
  end
  local md = null_to_nil(v.metadata)
  local version = null_to_nil(v.currentVersion)
  return { secretId = null_to_nil(v.secretID), name = v.name, version = math.tointeger(version) or version,
    metadata = type(md) == "table" and md or {}, createdAt = null_to_nil(v.createdAt), updatedAt = null_to_nil(v.updatedAt) }
end
api.secret_info = secret_info

local function secret_request(self, method, path, body)
  local res, err = self:_request(method, path, body)
  if not res then return nil, err end
  local v, jerr = json_body(res)
  if not v then return nil, jerr end
  return secret_info(v)
end

-- POST /secrets { name, value, metadata? } → info | nil, err (a name in use: E2B_CONFLICT)
function api:secret_create(name, value, metadata)
  return secret_request(self, "POST", "/secrets", { name = name, value = value, metadata = metadata })
end

-- POST /secrets/{id or name} { value, metadata? }: a new version. → info | nil, err
function api:secret_update(id, value, metadata)
  return secret_request(self, "POST", "/secrets/" .. urlencode(id), { value = value, metadata = metadata })
end

-- GET /secrets/{id or name} → info | nil, err (E2B_NOT_FOUND)
function api:secret_get(id)
  return secret_request(self, "GET", "/secrets/" .. urlencode(id))
end

-- GET /secrets[?limit=&nextToken=] → list of info, next_token | nil, err
function api:secret_list(opts)
  opts = opts or {}
  local q = {}
  if opts.limit then q[#q + 1] = "limit=" .. math.tointeger(opts.limit) end
  if opts.next_token then q[#q + 1] = "nextToken=" .. urlencode(opts.next_token) end
  local res, err = self:_request("GET", "/secrets" .. (#q > 0 and ("?" .. table.concat(q, "&")) or ""))
  if not res then return nil, err end
  local v, jerr = json_body(res)
  if not v then return nil, jerr end
  local out = {}
  for i, item in ipairs(v) do
    local s, serr = secret_info(item)
    if not s then return nil, serr end
    out[i] = s
  end
  local nt = res.headers and res.headers["x-next-token"]
  return out, (nt ~= "" and nt or nil)
end

-- DELETE /secrets/{id or name} → true | false (not found) | nil, err
function api:secret_delete(id)
  local res, err = self:_request("DELETE", "/secrets/" .. urlencode(id))
  if res then return true end
  if err.code == "E2B_NOT_FOUND" then return false end
  return nil, err
end

return api
