-- moonbox.e2b.client — the sandbox API not tied to one owned sandbox: what the SDK's static
-- Sandbox methods do, one control-plane request each (reference §2). `moonbox sandbox …` and
-- the owner's own calls (ctx.e2b:pause() …) go through it.
--
--   local c = client.new{ apiKey = ..., getenv = os.getenv }    → client | nil, err (E2B_CONFIG)
--   c:list{ metadata = {k = v}, state = {"running", "paused"}, limit = n, nextToken = t } → items, nextToken
--   c:create{ template, timeoutMs, metadata, envVars, allowInternetAccess, autoPause, secure,
--             network = { allowOut, denyOut, rules, allowPublicTraffic } } → item
--   c:updateNetwork(id, { allowOut, denyOut, allowInternetAccess, rules }) → true   (replaces every
--             rule: an omitted field is cleared; entries are checked here first, by sandboxd's
--             parser; rules in the network policy's shape, `secret = NAME` only here: a
--             `fromEnv` rule needs an owner that removes the secret it makes, ctx.e2b)
--   c:info(id) → item;  c:kill(id) → true | false (not found);  c:setTimeout(id, ms) → true
--   c:pause(id) → true | false (already paused);  c:resume(id, { timeoutMs }) → item
--   c:metrics(id, { start, ["end"] }) → { metric, ... }
--   c:logs(id, { cursor, limit, direction }) → { { timestamp, timestampMs, level, message, fields }, ... }
--             (the sandbox's log: lifecycle and processes; cursor in Unix ms, direction
--             "forward" (from the cursor, the oldest first) or "backward" (the newest first))
--   c:host(id, port [, domain, token]) → URL, headers (e2b-traffic-access-token when the sandbox
--             was made with allowPublicTraffic = false and token is its trafficAccessToken; else {})
--   c:snapshot(id, { name }) → { snapshotId, names };  c:snapshots{ sandboxId, limit, nextToken }
--   c:deleteSnapshot(id) → true | false;  c:connect(id, { timeoutMs }) → item (with the envd token)
--   c:buildTemplate(desc, { name, skipCache, onLogs, timeoutMs }) → { templateId, buildId, name }
--             (desc: moonbox.template's; the build's log entries to onLogs as they come)
--   c:templates() → { { templateId, names, buildStatus, public, cpuCount, memoryMB, ... } }
--   c:deleteTemplate(idOrName) → true | false (not found)
--   c:attach(id) → a handle on its envd (moonbox.world.e2b: sb:command) without setup or a lease change
--
--   c:createSecret(name, value, { metadata }) → secret;  c:updateSecret(name, value, { metadata })
--             → secret (a new version);  c:setSecret(name, value, o) → secret, "created"|"updated"
--   c:secretInfo(name) → secret;  c:secretExists(name) → boolean;  c:deleteSecret(name) → true | false
--   c:listSecrets{ limit, nextToken } → secrets, nextToken;  c:listAllSecrets() → secrets
--
-- Items are the SDK's view: { sandboxId, templateId, name, metadata, state, startedAt, endAt,
-- cpuCount, memoryMB, envdVersion, domain, network = { allowOut, denyOut, rules, allowPublicTraffic },
-- allowInternetAccess, trafficAccessToken }; rules' header values show secrets by name
-- (`Bearer <secret github-token>`), never a literal. Secrets: { secretId, name, version, metadata,
-- createdAt, updatedAt } (values are write-only).
-- Errors: E2B_NOT_FOUND (unknown id, naming it), E2B_UNAUTHORIZED, E2B_CONFLICT, … as the control
-- plane answers; E2B_INVALID_ARGUMENT for a network entry (here or from the server: the message
-- names it, `allowOut[2]: "10.0.0.0/33": ...`, indexes from 0 as on the wire); bad arguments
-- (types, unknown option names) raise.
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"
local S = require "moonbox.policy.schema"
local R = require "moonbox.policy.rules"
local api_mod = require "moonbox.e2b.api"
local endpoints = require "moonbox.e2b.endpoints"
local http = require "moonbox.http"
local pstream = require "moonbox.pstream"
local core = require "moonbox.core"
local envd = require "moonbox.e2b.envd"
local sandbox_mod = require "moonbox.world.e2b"
local template_mod = require "moonbox.e2b.template"
local policy_set = require "moonbox.policies"

local M = {}
local Client = {}
Client.__index = Client
M.Client = Client

local function check_id(id, what)
  if type(id) ~= "string" or not id:match("^[%w%-]+$") then
    error(("e2b: %s: sandbox id must be a non-empty string of letters, digits and '-'"):format(what), 3)
  end
end

local function check_ms(v, what)
  if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
    error(("e2b: %s: timeoutMs must be a positive finite number of milliseconds"):format(what), 3)
  end
end

-- opts: { apiKey, getenv, endpoints (resolved already), api (an api object: the owner's) }
function M.new(opts)
  opts = opts or {}
  local ep = opts.endpoints or endpoints.resolve({ apiKey = opts.apiKey }, opts.getenv)
  local a = opts.api
  if not a then
    if ep.local_sandboxd then
      return nil, errors.new("E2B_CONFIG", "no E2B endpoint: set E2B_API_KEY (with E2B_DOMAIN for a self-hosted "
        .. "E2B, or E2B_API_URL and E2B_SANDBOX_URL for a sandboxd)")
    end
    if not ep.api_key then return nil, errors.new("E2B_CONFIG", "configure apiKey or set E2B_API_KEY") end
    local timeouts = opts.timeouts or policy_set.default("timeouts")
    a = api_mod.new{ url = ep.api_url, api_key = ep.api_key, timeout_ms = timeouts.request_ms,
      create_timeout_ms = timeouts.create_ms, transport = ep.transport }
  end
  return setmetatable({ api = a, endpoints = ep }, Client)
end

-- The network options of create / updateNetwork, strictly: an unknown name or a wrong type
-- raises (naming it, and the nearest known name); then the entries are parsed as sandboxd parses
-- them, and rules checked as the network policy checks them (moonbox.policy.rules).
-- opts.env: whether `fromEnv` may appear in rules (an owner's call). → nil | err
-- (E2B_INVALID_ARGUMENT naming the entry or the rule)
local NETWORK_KEYS = { "allowOut", "denyOut", "allowInternetAccess", "rules" }
local CREATE_NETWORK_KEYS = { "allowOut", "denyOut", "rules", "allowPublicTraffic" }
M.NETWORK_KEYS, M.CREATE_NETWORK_KEYS = NETWORK_KEYS, CREATE_NETWORK_KEYS
local function check_network(o, what, keys, level, opts)
  level = level + 1
  if type(o) ~= "table" then error(("e2b: %s: expects a table { %s }"):format(what, table.concat(keys, ", ")), level) end
  local known = {}
  for _, k in ipairs(keys) do known[k] = true end
  for k in pairs(o) do
    if not known[k] then
      local near = type(k) == "string" and S.nearest(k, keys)
      error(("e2b: %s: unknown option %s (expected %s%s)"):format(what, S.show(k), table.concat(keys, ", "),
        near and ("; the nearest is " .. near) or ""), level)
    end
  end
  for _, k in ipairs({ "allowOut", "denyOut" }) do
    local l = o[k]
    if l ~= nil then
      local n = 0
      if type(l) == "table" then for _ in pairs(l) do n = n + 1 end end
      if type(l) ~= "table" or n ~= #l then error(("e2b: %s: %s must be a list of strings"):format(what, k), level) end
      for i, x in ipairs(l) do
        if type(x) ~= "string" then error(("e2b: %s: %s[%d] must be a string, got %s"):format(what, k, i, type(x)), level) end
      end
    end
  end
  for _, k in ipairs({ "allowInternetAccess", "allowPublicTraffic" }) do
    if o[k] ~= nil and type(o[k]) ~= "boolean" then error(("e2b: %s: %s must be a boolean"):format(what, k), level) end
  end
  local _, err = core.egress.parse{ allowOut = o.allowOut, denyOut = o.denyOut }
  if err then return errors.new("E2B_INVALID_ARGUMENT", ("%s: %s"):format(what, err.message),
    { list = err.list, index = err.index, entry = err.entry }) end
  if o.rules ~= nil then
    local msg, kind = R.check(o.rules)
    if msg and kind == "shape" then error(("e2b: %s: %s"):format(what, msg), level) end
    if msg then return errors.new("E2B_INVALID_ARGUMENT", ("%s: %s"):format(what, msg)) end
    if not (opts and opts.env) then
      for _, h in ipairs(R.headers(o.rules)) do
        if h.fromEnv then
          error(("e2b: %s: rules[%s].headers%s.fromEnv: a host variable becomes a secret only for a composition's "
            .. "sandbox (ctx.e2b:updateNetwork), which removes it again; here name a stored secret (secret = NAME)")
            :format(what, S.show(h.host), R.path_part(h.header)), level)
        end
      end
    end
  end
end
M.check_network = check_network

-- Rules checked by check_network in E2B's shape (fromEnv through env_secret(var) → secret name).
function M.wire_rules(rules, env_secret)
  if rules == nil then return nil end
  return R.wire(rules, env_secret or function(v) error("e2b: rules: no secret for fromEnv " .. tostring(v), 3) end)
end

local function named(err, id)
  if err.code == "E2B_NOT_FOUND" and not err.message:find(id, 1, true) then
    err.message = ("sandbox %s not found: %s"):format(id, err.message)
  end
  return err
end

-- The option fields each call takes: any other is a mistake, raised at the caller's line.
M.OPTIONS = { list = { "metadata", "state", "limit", "nextToken" },
  create = { "template", "timeoutMs", "metadata", "envVars", "allowInternetAccess", "autoPause", "secure", "network" },
  connect = { "timeoutMs" }, resume = { "timeoutMs" }, listAll = { "metadata", "state", "limit", "nextToken" },
  listAllSecrets = { "limit", "nextToken" }, metrics = { "start", "end" }, snapshot = { "name" },
  snapshots = { "sandboxId", "limit", "nextToken" }, listSecrets = { "limit", "nextToken" } }
local function only(o, call)
  local unknown = fields.unknown(o, M.OPTIONS[call], "e2b: " .. call)
  if unknown then error(unknown, 3) end
end

function Client:list(q)
  q = q or {}
  if type(q) ~= "table" then error("e2b: list: expects a table { metadata, state, limit, nextToken }", 2) end
  only(q, "list")
  if q.metadata ~= nil then
    if type(q.metadata) ~= "table" then error("e2b: list: metadata must be a table of name = string", 2) end
    for k, v in pairs(q.metadata) do
      if type(k) ~= "string" or type(v) ~= "string" then error("e2b: list: metadata must be a table of name = string", 2) end
    end
  end
  local state = q.state
  if type(state) == "string" then state = { state } end
  if state ~= nil then
    if type(state) ~= "table" then error("e2b: list: state must be \"running\", \"paused\" or a list of them", 2) end
    for _, s in ipairs(state) do
      if s ~= "running" and s ~= "paused" then
        error(("e2b: list: state %q is not one of running, paused"):format(tostring(s)), 2)
      end
    end
  end
  if q.limit ~= nil and (math.type(q.limit) ~= "integer" or q.limit < 1) then
    error("e2b: list: limit must be a positive integer", 2)
  end
  local items, next_or_err = self.api:list{ metadata = q.metadata, state = state, limit = q.limit, next_token = q.nextToken }
  if not items then return nil, next_or_err end
  local out = {}
  for i, it in ipairs(items) do out[i] = it.public or it.raw end
  return out, next_or_err
end

-- Every page of list(q) (follows nextToken) → items | nil, err
function Client:listAll(q)
  q = q or {}
  if type(q) == "table" then only(q, "listAll") end
  local all, token = {}, q.nextToken
  repeat
    local page, nt = self:list{ metadata = q.metadata, state = q.state, limit = q.limit, nextToken = token }
    if not page then return nil, nt end
    for _, it in ipairs(page) do all[#all + 1] = it end
    token = nt
  until not token
  return all
end

-- A sandbox that outlives this process (its lease: timeoutMs, default 5 min).
function Client:create(o)
  o = o or {}
  if type(o) ~= "table" then error("e2b: create: expects a table { template, timeoutMs, metadata, envVars, ... }", 2) end
  only(o, "create")
  if o.template ~= nil and (type(o.template) ~= "string" or o.template == "") then
    error("e2b: create: template must be a non-empty string (a template or snapshot name)", 2)
  end
  if o.timeoutMs ~= nil then check_ms(o.timeoutMs, "create") end
  for _, f in ipairs{ "metadata", "envVars" } do
    local bad = o[f] ~= nil and (type(o[f]) ~= "table" and "must be a table" or S.string_map(o[f]))
    if bad then error(("e2b: create: %s %s"):format(f, bad), 2) end
  end
  for _, f in ipairs{ "allowInternetAccess", "autoPause", "secure" } do
    if o[f] ~= nil and type(o[f]) ~= "boolean" then error(("e2b: create: %s must be a boolean"):format(f), 2) end
  end
  local network
  if o.network ~= nil then
    local bad = check_network(o.network, "create: network", CREATE_NETWORK_KEYS, 2)
    if bad then return nil, bad end
    network = { allowOut = o.network.allowOut, denyOut = o.network.denyOut, rules = M.wire_rules(o.network.rules),
      allowPublicTraffic = o.network.allowPublicTraffic }
  end
  local i, err = self.api:create{ template = o.template, timeout_ms = o.timeoutMs, metadata = o.metadata,
    env_vars = o.envVars, allow_internet_access = o.allowInternetAccess, auto_pause = o.autoPause, secure = o.secure,
    network = network }
  if not i then return nil, err end
  return i.public
end

function Client:info(id)
  check_id(id, "info")
  local i, err = self.api:get(id)
  if not i then return nil, named(err, id) end
  return i.public
end

-- PUT /sandboxes/{id}/network: the sandbox's rules become exactly these (an omitted field is
-- cleared: no allowOut, no denyOut, internet on). Applies to connections opened after it returns.
function Client:updateNetwork(id, o)
  check_id(id, "updateNetwork")
  local bad = check_network(o, "updateNetwork", NETWORK_KEYS, 2)
  if bad then return nil, bad end
  local ok, err = self.api:update_network(id, { allowOut = o.allowOut, denyOut = o.denyOut,
    rules = M.wire_rules(o.rules), allow_internet_access = o.allowInternetAccess })
  if not ok then return nil, named(err, id) end
  return true
end

function Client:kill(id)
  check_id(id, "kill")
  return self.api:delete(id)
end

function Client:setTimeout(id, ms)
  check_id(id, "setTimeout")
  check_ms(ms, "setTimeout")
  local ok, err = self.api:set_timeout(id, ms)
  if not ok then return nil, named(err, id) end
  return true
end

function Client:pause(id)
  check_id(id, "pause")
  local ok, err = self.api:pause(id)
  if ok == nil then return nil, named(err, id) end
  return ok
end

function Client:connect(id, o)
  check_id(id, "connect")
  o = o or {}
  if type(o) ~= "table" then error("e2b: connect: options must be a table { timeoutMs }", 2) end
  only(o, "connect")
  if o.timeoutMs ~= nil then check_ms(o.timeoutMs, "connect") end
  local i, err = self.api:connect(id, o.timeoutMs)
  if not i then return nil, named(err, id) end
  local p = i.public
  p.envdAccessToken = i.access_token
  return p
end

-- A handle on a running sandbox's envd (moonbox.world.e2b) for commands run in it directly:
-- no setup inside it (no mbwrap, no runtime root) and no change to its lease (one GET, which
-- carries the envd token). A paused sandbox is not resumed: E2B_PAUSED says so.
-- → sandbox handle | nil, err (E2B_NOT_FOUND naming the id)
function Client:attach(id)
  check_id(id, "attach")
  local i, err = self.api:get(id)
  if not i then return nil, named(err, id) end
  if i.public.state == "paused" then
    return nil, errors.new("E2B_PAUSED", ("sandbox %s is paused: resume it first (moonbox sandbox resume %s)"):format(id, id))
  end
  local t = policy_set.default("timeouts")
  local sb = sandbox_mod.new{ id = id, info = i, api = self.api, core = core, timeouts = t }
  sb.envd = envd.new{ url = endpoints.sandbox_url(self.endpoints, id, i.domain), sandbox_id = id,
    access_token = i.access_token, http = http, pstream = pstream, core = core,
    transport = self.endpoints.transport, codec = self.endpoints.codec, timeout_ms = t.request_ms,
    stream_open_ms = t.stream_open_ms, stream_idle_ms = t.stream_idle_ms, keepalive_s = t.keepalive_interval_s }
  return sb
end

-- Resuming is connecting (E2B's /resume is deprecated): the lease restarts with timeoutMs.
function Client:resume(id, o)
  if type(o) == "table" then only(o, "resume") end
  local p, err = self:connect(id, o)
  if not p then return nil, err end
  p.envdAccessToken = nil
  return p
end

function Client:metrics(id, o)
  check_id(id, "metrics")
  o = o or {}
  if type(o) ~= "table" then error("e2b: metrics: options must be a table { start, end }", 2) end
  only(o, "metrics")
  for _, k in ipairs({ "start", "end" }) do
    if o[k] ~= nil and (type(o[k]) ~= "number" or o[k] < 0) then
      error(("e2b: metrics: %s must be unix seconds"):format(k), 2)
    end
  end
  local m, err = self.api:metrics(id, o)
  if not m then return nil, named(err, id) end
  return m
end

local LOGS_FIELDS = { "cursor", "limit", "direction" }
M.LOGS_FIELDS = LOGS_FIELDS
function Client:logs(id, o)
  check_id(id, "logs")
  o = o or {}
  if type(o) ~= "table" then error("e2b: logs: options must be a table", 2) end
  local unknown = fields.unknown(o, LOGS_FIELDS, "e2b: logs")
  if unknown then error(unknown, 2) end
  if o.cursor ~= nil and math.type(o.cursor) ~= "integer" or (o.cursor or 0) < 0 then
    error("e2b: logs: cursor must be Unix milliseconds (a whole number)", 2)
  end
  if o.limit ~= nil and (math.type(o.limit) ~= "integer" or o.limit < 1) then
    error("e2b: logs: limit must be a positive whole number", 2)
  end
  if o.direction ~= nil and o.direction ~= "forward" and o.direction ~= "backward" then
    error("e2b: logs: direction must be \"forward\" or \"backward\"", 2)
  end
  local l, err = self.api:logs(id, o)
  if not l then return nil, named(err, id) end
  return l
end

function Client:snapshot(id, o)
  check_id(id, "snapshot")
  o = o or {}
  if type(o) ~= "table" then error("e2b: snapshot: options must be a table { name }", 2) end
  only(o, "snapshot")
  if o.name ~= nil and (type(o.name) ~= "string" or o.name == "") then
    error("e2b: snapshot: name must be a non-empty string", 2)
  end
  local s, err = self.api:snapshot(id, o.name)
  if not s then return nil, named(err, id) end
  return s
end

function Client:snapshots(q)
  q = q or {}
  if type(q) ~= "table" then error("e2b: snapshots: expects a table { sandboxId, limit, nextToken }", 2) end
  only(q, "snapshots")
  if q.limit ~= nil and (math.type(q.limit) ~= "integer" or q.limit < 1) then
    error("e2b: snapshots: limit must be a positive integer", 2)
  end
  if q.sandboxId ~= nil then check_id(q.sandboxId, "snapshots") end
  return self.api:snapshots{ sandbox_id = q.sandboxId, limit = q.limit, next_token = q.nextToken }
end

function Client:deleteSnapshot(id)
  if type(id) ~= "string" or id == "" then error("e2b: deleteSnapshot: snapshot id must be a non-empty string", 2) end
  return self.api:delete_snapshot(id)
end

-- Templates (moonbox.e2b.template): build a description of moonbox.template (or the table
-- template{} takes) as template `name`, list every template (base, built ones, snapshots), delete one.
function Client:buildTemplate(desc, o)
  template_mod.check_build_options(o, 2)
  return template_mod.build(self.api, desc, o)
end

function Client:templates()
  return template_mod.list(self.api)
end

function Client:deleteTemplate(ref)
  if type(ref) ~= "string" or ref == "" then error("e2b: deleteTemplate: a template id or name must be a non-empty string", 2) end
  return template_mod.delete(self.api, ref)
end

-- The URL of `port` inside sandbox `id`: E2B's `https://<port>-<id>.<domain>`; with
-- E2B_SANDBOX_URL (sandboxd in plain mode), the proxy path sandboxd serves,
-- `<E2B_SANDBOX_URL>/_sandbox/<id>/<port>/`. And the headers a request there needs: E2B's
-- e2b-traffic-access-token when the sandbox was created with allowPublicTraffic = false (token:
-- its trafficAccessToken, from the create or connect answer, or getInfo where the server
-- reports it), else none. → url, headers (a new table, possibly empty)
function Client:host(id, port, domain, token)
  check_id(id, "host")
  if math.type(port) ~= "integer" or port < 1 or port > 65535 then
    error("e2b: host: port must be an integer in 1..65535", 2)
  end
  if token ~= nil and (type(token) ~= "string" or token == "") then
    error("e2b: host: token must be a non-empty string (the sandbox's trafficAccessToken)", 2)
  end
  return M.host_url(self.endpoints, id, port, domain), M.traffic_headers(token)
end

M.TRAFFIC_HEADER = "e2b-traffic-access-token"
function M.traffic_headers(token)
  if token then return { [M.TRAFFIC_HEADER] = token } end
  return {}
end

------------------------------------------------------------------------------------------------
-- The secret store. Names as E2B takes them (moonbox.policy.rules.secret_name_error), values
-- non-empty strings a header can carry (no control characters but tab). A bad name or value is
-- E2B_INVALID_ARGUMENT before any request (never quoting the value); a wrong type raises.

M.MAX_SECRET = 65536          -- bytes of a value (sandboxd's limit; a header carries it)

local function check_secret_name(name, what)
  if type(name) ~= "string" then error(("e2b: %s: the secret name must be a string"):format(what), 3) end
  local bad = R.secret_name_error(name)
  if bad then return errors.new("E2B_INVALID_ARGUMENT", ("%s: %s"):format(what, bad)) end
end

-- → nil | why (never quoting the value)
function M.secret_value_error(value)
  if value == "" then return "the value is empty" end
  if #value > M.MAX_SECRET then return ("the value is longer than %d bytes"):format(M.MAX_SECRET) end
  local at = value:find("[%z\1-\8\10-\31\127]")
  if at then
    local b = value:byte(at)
    local what = b == 10 and "a line feed" or b == 13 and "a carriage return" or b == 0 and "a NUL" or "a control character"
    return ("the value holds %s at byte %d: a header value cannot"):format(what, at)
  end
end

local function check_secret(name, value, o, what)
  local bad = check_secret_name(name, what)
  if bad then return bad end
  if type(value) ~= "string" then error(("e2b: %s: the value must be a string"):format(what), 3) end
  local why = M.secret_value_error(value)
  if why then return errors.new("E2B_INVALID_ARGUMENT", ("%s %s: %s"):format(what, name, why)) end
  if o ~= nil and type(o) ~= "table" then error(("e2b: %s: options must be a table { metadata }"):format(what), 3) end
  for k in pairs(o or {}) do
    if k ~= "metadata" then error(("e2b: %s: unknown option %s (expected metadata)"):format(what, S.show(k)), 3) end
  end
  local md = o and o.metadata
  if md ~= nil then
    local mbad = type(md) ~= "table" and "must be a table" or S.string_map(md)
    if mbad then error(("e2b: %s: metadata %s"):format(what, mbad), 3) end
  end
end

local function secret_named(err, name)
  if err.code == "E2B_NOT_FOUND" then err.message = ("secret %s not found: %s"):format(name, err.message)
  elseif err.code == "E2B_CONFLICT" then err.message = ("secret %s exists already: %s"):format(name, err.message) end
  return err
end

function Client:createSecret(name, value, o)
  local bad = check_secret(name, value, o, "createSecret")
  if bad then return nil, bad end
  local s, err = self.api:secret_create(name, value, o and o.metadata)
  if not s then return nil, secret_named(err, name) end
  return s
end

function Client:updateSecret(name, value, o)
  local bad = check_secret(name, value, o, "updateSecret")
  if bad then return nil, bad end
  local s, err = self.api:secret_update(name, value, o and o.metadata)
  if not s then return nil, secret_named(err, name) end
  return s
end

-- Create, or a new version when the name is in use. → secret, "created" | "updated" | nil, err
function Client:setSecret(name, value, o)
  local bad = check_secret(name, value, o, "setSecret")
  if bad then return nil, bad end
  local s, err = self.api:secret_create(name, value, o and o.metadata)
  if s then return s, "created" end
  if err.code ~= "E2B_CONFLICT" then return nil, secret_named(err, name) end
  s, err = self.api:secret_update(name, value, o and o.metadata)
  if not s then return nil, secret_named(err, name) end
  return s, "updated"
end

function Client:secretInfo(name)
  if type(name) ~= "string" or name == "" then error("e2b: secretInfo: the secret name must be a non-empty string", 2) end
  local s, err = self.api:secret_get(name)
  if not s then return nil, secret_named(err, name) end
  return s
end

function Client:secretExists(name)
  local s, err = self:secretInfo(name)
  if s then return true end
  if err.code == "E2B_NOT_FOUND" then return false end
  return nil, err
end

function Client:deleteSecret(name)
  if type(name) ~= "string" or name == "" then error("e2b: deleteSecret: the secret name must be a non-empty string", 2) end
  return self.api:secret_delete(name)
end

function Client:listSecrets(q)
  q = q or {}
  if type(q) ~= "table" then error("e2b: listSecrets: expects a table { limit, nextToken }", 2) end
  only(q, "listSecrets")
  if q.limit ~= nil and (math.type(q.limit) ~= "integer" or q.limit < 1) then
    error("e2b: listSecrets: limit must be a positive integer", 2)
  end
  return self.api:secret_list{ limit = q.limit, next_token = q.nextToken }
end

-- Every page of listSecrets (follows nextToken) → secrets | nil, err
function Client:listAllSecrets(q)
  q = q or {}
  if type(q) == "table" then only(q, "listAllSecrets") end
  local all, token = {}, q.nextToken
  repeat
    local page, nt = self:listSecrets{ limit = q.limit, nextToken = token }
    if not page then return nil, nt end
    for _, s in ipairs(page) do all[#all + 1] = s end
    token = nt
  until not token
  return all
end

function M.host_url(ep, id, port, domain)
  if ep.sandbox_url then
    return ("%s/_sandbox/%s/%d/"):format(ep.sandbox_url:gsub("/+$", ""), id, port)
  end
  return ("https://%d-%s.%s"):format(port, id, domain or ep.domain or "e2b.app")
end

return M
