-- moonbox.e2b.envd — the in-sandbox daemon's API: Connect unary RPC and process streams in
-- either codec — binary protobuf (application/proto, application/connect+proto: raw bytes,
-- decoded in C) or JSON — plus GET/POST /files (reference §3–6). Callers speak one Lua shape
-- (the JSON codec's objects); core.rpc_encode/rpc_decode map it to protobuf. With codec
-- "proto", a server that refuses it (415, `unimplemented`) turns the client to JSON for good
-- and the unary call is retried once. One client per sandbox; every request carries
-- E2b-Sandbox-Id / E2b-Sandbox-Port (routing) and X-Access-Token when the sandbox has one.
-- Errors: Connect codes become E2B_<CODE> (E2B_NOT_FOUND, E2B_ALREADY_EXISTS, …) with
-- `connect_code`, `status`; /files errors map by HTTP status; transport errors pass through.
local cjson = require("cjson").new()
local errors = require "moonbox.errors"
local endpoints = require "moonbox.e2b.endpoints"
local core = require "moonbox.core"
local http = require "moonbox.http"
local pstream = require "moonbox.pstream"

local envd = {}
envd.__index = envd
local upload_seq = 0

envd.PORT = endpoints.ENVD_PORT
envd.USER_AGENT = "moonbox/0.1"
local MAX_UNARY = 16 * 1024 * 1024

-- HTTP status → Connect code, for errors without a JSON code (connect-es http-status.ts).
local CODE_FOR_STATUS = {
  [400] = "internal", [401] = "unauthenticated", [403] = "permission_denied", [404] = "unimplemented",
  [429] = "unavailable", [502] = "unavailable", [503] = "unavailable", [504] = "unavailable",
}

local function urlencode(s)
  return (tostring(s):gsub("[^%w%-%._~/]", function(c) return ("%%%02X"):format(c:byte()) end))
end

-- cfg: { url (E2B_SANDBOX_URL or the per-sandbox host), sandbox_id, access_token?, user?,
--        http, pstream (moonbox.pstream, or a stand-in), core (codecs), timeout_ms,
--        stream_open_ms, stream_idle_ms, keepalive_s, transport = { ca_file, connect_to },
--        codec = "json" | "proto" }
function envd.new(cfg)
  assert(type(cfg.url) == "string" and cfg.url ~= "", "envd: url required")
  assert(type(cfg.sandbox_id) == "string" and cfg.sandbox_id ~= "", "envd: sandbox_id required")
  local self = setmetatable({}, envd)
  self.url = cfg.url:gsub("/+$", "")
  self.sandbox_id = cfg.sandbox_id
  self.access_token = cfg.access_token
  self.user = cfg.user
  self.http = cfg.http or http
  self.pstream = cfg.pstream or pstream
  self.core = cfg.core
  self.timeout_ms = cfg.timeout_ms or 60000
  self.stream_open_ms = cfg.stream_open_ms or 30000
  self.stream_idle_ms = cfg.stream_idle_ms or 150000
  self.keepalive_s = cfg.keepalive_s or 50
  self.transport = cfg.transport or {}
  self.codec = cfg.codec or "json"
  assert(self.codec == "json" or self.codec == "proto", "envd: codec must be \"json\" or \"proto\"")
  return self
end

-- Every request of this client: the TLS trust and connect-to settings of the endpoint.
function envd:_req(r)
  r.ca_file, r.connect_to = self.transport.ca_file, self.transport.connect_to
  return r
end

function envd:_core()
  self.core = self.core or core
  return self.core
end

function envd:_headers(extra)
  local h = {
    ["User-Agent"] = envd.USER_AGENT,
    ["E2b-Sandbox-Id"] = self.sandbox_id,
    ["E2b-Sandbox-Port"] = tostring(envd.PORT),
  }
  if self.access_token then h["X-Access-Token"] = self.access_token end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

-- Basic auth names the user a process runs as (opts.user per call, else the client's user).
function envd:_auth(h, user)
  user = user or self.user
  if user then h["Authorization"] = "Basic " .. self:_core().b64encode(user .. ":") end
  return h
end

local rpc_error = errors.from_connect

-- An error known only by its HTTP status.
local function status_error(method, status, message)
  return rpc_error(method, CODE_FOR_STATUS[status] or "unknown", message, status)
end

local function is_json(ct)
  return ct ~= nil and ct:lower():match("^application/json") ~= nil
end

-- A server that does not take the binary codec.
local function refuses_proto(res)
  if res.status == 415 then return true end
  if res.status ~= 200 and is_json(res.headers and res.headers["content-type"]) then
    local ok, v = pcall(cjson.decode, res.body)
    return ok and type(v) == "table" and v.code == "unimplemented"
  end
  return false
end

-- One unary request with a ready body; `proto` = the body and the answer are protobuf.
function envd:_unary(method, body, proto, opts)
  local res, err = self.http.request(self:_req{
    method = "POST", url = self.url .. "/" .. method,
    headers = self:_auth(self:_headers{
      ["Content-Type"] = proto and "application/proto" or "application/json", ["Connect-Protocol-Version"] = "1" }),
    body = body, max_bytes = opts.max_bytes or MAX_UNARY, timeout_ms = opts.timeout_ms or self.timeout_ms,
  })
  if not res then return nil, err end
  if proto and refuses_proto(res) then return nil, nil, true end
  local ct = res.headers and res.headers["content-type"]
  if res.status ~= 200 then
    if is_json(ct) then
      local ok, v = pcall(cjson.decode, res.body)
      if ok and type(v) == "table" and type(v.code) == "string" then
        return nil, rpc_error(method, v.code, type(v.message) == "string" and v.message or "", res.status)
      end
      local m = ok and type(v) == "table" and type(v.message) == "string" and v.message or ("HTTP " .. res.status)
      return nil, status_error(method, res.status, m)
    end
    return nil, status_error(method, res.status, "HTTP " .. res.status)
  end
  local text = res.body ~= "" and res.body or "{}"
  if proto then
    if not (ct and ct:lower():match("^application/proto")) then
      return nil, rpc_error(method, "unknown", "unsupported content type " .. tostring(ct), res.status)
    end
    local _, out = self:_core().rpc_method(method)
    local j, derr = self:_core().rpc_decode(out, res.body)
    if not j then return nil, errors.new("E2B_PROTOCOL", method .. ": " .. derr.message) end
    text = j
  elseif not is_json(ct) then
    return nil, rpc_error(method, "unknown", "unsupported content type " .. tostring(ct), res.status)
  end
  local ok, v = pcall(cjson.decode, text)
  if not ok or type(v) ~= "table" then
    return nil, errors.new("E2B_PROTOCOL", method .. ": invalid JSON response")
  end
  return v
end

-- Unary call: method is "filesystem.Filesystem/Stat" etc. → decoded response | nil, err.
-- `proto_body`: the request already in protobuf (SendInput's raw bytes skip JSON and base64).
function envd:unary(method, msg, opts, proto_body)
  opts = opts or {}
  if self.codec == "proto" then
    local body = proto_body
    if not body then
      local inn = self:_core().rpc_method(method)
      local berr
      body, berr = self:_core().rpc_encode(inn, cjson.encode(msg or {}))
      if not body then return nil, errors.new("E2B_INVALID", method .. ": " .. berr.message) end
    end
    local r, err, refused = self:_unary(method, body, true, opts)
    if not refused then return r, err end
    self.codec = "json"                          -- the server speaks JSON only: from now on too
  end
  return self:_unary(method, cjson.encode(msg or {}), false, opts)
end

-- SendInput: stdin (or a terminal's input) bytes.
function envd:send_input(pid, data, pty)
  local core = self:_core()
  local b64 = self.codec == "json" and core.b64encode(data) or nil
  local input = pty and { pty = b64 } or { stdin = b64 }
  return self:unary("process.Process/SendInput", { process = { pid = pid }, input = input }, nil,
    self.codec == "proto" and core.rpc_send_input(pid, data, pty) or nil)
end

-- A process stream (process.Process/Start or Connect), decoded in C as it arrives into the
-- sinks of `cfg` (moonbox.pstream). No Connect-Timeout-Ms: envd kills a process when it
-- elapses, so managed processes never get one; a stream silent for stream_idle_ms (no output,
-- no keepalive) fails with E2B_TIMEOUT. opts: user (run as), open_timeout_ms (until the
-- response headers). → stream | nil, err
function envd:process_stream(method, msg, cfg, opts)
  opts = opts or {}
  local core = self:_core()
  local headers = self:_auth(self:_headers{
    ["Content-Type"] = "application/connect+json", ["Connect-Protocol-Version"] = "1",
    ["Keepalive-Ping-Interval"] = tostring(self.keepalive_s),
  }, opts.user)
  -- what runs, for debugging listings (pstream.open_streams)
  local p = type(msg) == "table" and msg.process
  cfg.tag = cfg.tag or (p and table.concat({ tostring(p.cmd), p.args and tostring(p.args[1]) or nil,
    p.args and tostring(p.args[#p.args]) or nil }, " "))
  local json = cjson.encode(msg or {})
  local function request(body, ct)
    local h = {}
    for k, v in pairs(headers) do h[k] = v end
    h["Content-Type"] = ct
    return self:_req{
      method = "POST", url = self.url .. "/" .. method, headers = h, body = core.envelope(0, body),
      timeout_ms = opts.open_timeout_ms or self.stream_open_ms,
      idle_timeout_ms = opts.idle_ms or self.stream_idle_ms,
    }
  end
  if self.codec ~= "proto" then return self.pstream.open(request(json, "application/connect+json"), cfg) end
  local payload, perr = core.rpc_encode(core.rpc_method(method), json)
  if not payload then return nil, errors.new("E2B_INVALID", method .. ": " .. perr.message) end
  local pcfg = setmetatable({ proto = true }, { __index = cfg })
  -- a server that refuses the binary codec gets this stream again in JSON, and JSON from now on
  pcfg.fallback = function(status, body)
    if not refuses_proto{ status = status, body = body, headers = { ["content-type"] = "application/json" } } then
      return nil
    end
    self.codec = "json"
    return request(json, "application/connect+json"), cfg
  end
  return self.pstream.open(request(payload, "application/connect+proto"), pcfg)
end

-- The error of a process stream that closed with `err`: an HTTP answer is mapped like a unary
-- one (its Connect JSON code, else its status); transport and decoding errors pass through.
function envd:stream_error(method, s, err)
  if err and err.code == "E2B_HTTP" then
    local status = s:status() or 0
    local body = s:error_body()
    local ok, v = pcall(cjson.decode, body ~= "" and body or "null")
    if ok and type(v) == "table" and type(v.code) == "string" then
      return rpc_error(method, v.code, type(v.message) == "string" and v.message or "", status)
    end
    local m = ok and type(v) == "table" and type(v.message) == "string" and v.message or ("HTTP " .. status)
    return status_error(method, status, m)
  end
  return err
end

local function files_error(op, path, status, body)
  local msg = body
  local ok, v = pcall(cjson.decode, body or "")
  if ok and type(v) == "table" and type(v.message) == "string" then msg = v.message end
  local code = (status == 404 and "E2B_NOT_FOUND") or (status == 401 and "E2B_UNAUTHORIZED")
    or (status == 400 and "E2B_INVALID_ARGUMENT") or (status == 507 and "E2B_NO_SPACE")
    or (status == 502 and "E2B_UNAVAILABLE") or "E2B_HTTP"
  return errors.new(code, ("%s %s: %d: %s"):format(op, path, status, tostring(msg or "")), { status = status })
end

function envd:_files_url(path, user)
  user = user or self.user
  local q = "path=" .. urlencode(path)
  if user then q = q .. "&username=" .. urlencode(user) end
  return self.url .. "/files?" .. q
end

-- GET /files as a stream: → { read = fn(timeout) → chunk | nil | nil, err, close, size } | nil, err
-- opts.max_bytes (required) is an inclusive cap: a file whose Content-Length exceeds it fails
-- at once, and a body that grows past it fails at the first chunk over the cap (E2B_TOO_LARGE);
-- the transport itself is capped at max_bytes (its 0 means "no cap", hence at least 1).
-- max_bytes = false: no cap at all (a streaming reader holding one chunk at a time).
function envd:open_download(path, opts)
  assert(opts and opts.max_bytes ~= nil, "envd:open_download: max_bytes required (false: no cap)")
  local max = opts.max_bytes or math.huge
  local function too_large()
    return errors.new("E2B_TOO_LARGE", ("%s is larger than %d bytes"):format(path, max), { size_limit = max })
  end
  local s, err = self.http.stream(self:_req{
    method = "GET", url = self:_files_url(path), headers = self:_headers{ ["Accept-Encoding"] = "identity" },
    timeout_ms = opts.timeout_ms or self.timeout_ms, max_bytes = max == math.huge and 0 or math.max(max, 1),
  })
  if not s then
    if err.code == "E2B_TOO_LARGE" then return nil, too_large() end
    return nil, err
  end
  if s.status ~= 200 then
    local parts, n = {}, 0
    while n < 65536 do
      local c = s:read(self.timeout_ms)
      if not c then break end
      parts[#parts + 1] = c; n = n + #c
    end
    s:close()
    return nil, files_error("GET /files", path, s.status, table.concat(parts))
  end
  local cl = tonumber(s.headers and s.headers["content-length"] or "")
  if cl and cl > max then s:close() return nil, too_large() end
  local n, idle = 0, opts.idle_ms or self.timeout_ms
  local d = { size = cl }
  function d.read(timeout_ms)
    local c, rerr = s:read(timeout_ms or idle)
    if c == nil then
      s:close()
      if rerr and rerr.code == "E2B_TOO_LARGE" then return nil, too_large() end
      return nil, rerr
    end
    n = n + #c
    if n > max then s:close() return nil, too_large() end
    return c
  end
  function d.close() s:close() end
  return d
end

-- GET /files, collected: → body | nil, err (same cap rules as open_download).
function envd:download(path, opts)
  local d, err = self:open_download(path, opts)
  if not d then return nil, err end
  local parts = {}
  while true do
    local c, rerr = d.read()
    if c == nil then
      if rerr then return nil, rerr end
      break
    end
    parts[#parts + 1] = c
  end
  return table.concat(parts)
end

-- POST /files: data (string) as one multipart part, or opts.file = host path streamed as
-- application/octet-stream, or opts.source = a pack (core.sync_root():pack) produced while it
-- is sent (octet-stream, chunked: the archive is never whole in memory). opts.metadata →
-- X-Metadata-<key>; opts.user → ?username= (the owner of the file and of the parents it
-- creates). → entries | nil, err
function envd:upload(path, data, opts)
  opts = opts or {}
  local extra = {}
  for k, v in pairs(opts.metadata or {}) do extra["X-Metadata-" .. k] = v end
  local req = self:_req{ method = "POST", url = self:_files_url(path, opts.user), max_bytes = 1024 * 1024,
    timeout_ms = opts.timeout_ms or self.timeout_ms }
  if opts.file then
    extra["Content-Type"] = "application/octet-stream"
    req.body_file = opts.file
  elseif opts.source then
    extra["Content-Type"] = "application/octet-stream"
    req.body_source = opts.source
  else
    assert(type(data) == "string", "envd:upload: data must be a string")
    -- A boundary that does not occur in the data (rehashed on the rare clash).
    upload_seq = upload_seq + 1
    local seed, boundary = ("%s:%d:%d:%d"):format(path, #data, os.time(), upload_seq), nil
    repeat
      seed = self:_core().sha256_hex(seed)
      boundary = "moonbox-" .. seed:sub(1, 32)
    until not data:find(boundary, 1, true)
    extra["Content-Type"] = "multipart/form-data; boundary=" .. boundary
    -- Three pieces sent as they are: the content is never copied into one body string.
    req.body = {
      table.concat{ "--", boundary, "\r\n",
        'Content-Disposition: form-data; name="file"; filename="', (path:gsub('[\r\n"]', "_")), '"\r\n',
        "Content-Type: application/octet-stream\r\n\r\n" },
      data,
      "\r\n--" .. boundary .. "--\r\n",
    }
  end
  req.headers = self:_headers(extra)
  local res, err = self.http.request(req)
  if not res then return nil, err end
  if res.status ~= 200 then return nil, files_error("POST /files", path, res.status, res.body) end
  local ok, v = pcall(cjson.decode, res.body)
  if not ok or type(v) ~= "table" or not v[1] then
    return nil, errors.new("E2B_PROTOCOL", "POST /files: expected information about the written file")
  end
  return v
end

return envd
