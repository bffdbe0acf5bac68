-- moonbox.consumers.lsp — plugin "lsp" (`ctx.lsp`): a language-server client over stdio,
-- written only against the fs and subprocess seams, so the server runs wherever they point.
--
--   local c = ctx.lsp:start{ root, command, args, env, initializationOptions, languageIds,
--                            maxDocumentBytes, requestTimeoutMs, startTimeoutMs } → client | nil, err
--   c:open(path) / c:change(path) / c:closeDocument(path)   (text read through ctx.fs)
--   c:diagnostics(path, { timeoutMs }) → { Diagnostic, ... } for the document's current text
--   c:hover(path, { line, character }) → Hover | false;  c:definition(path, pos) → { {path, uri, range}, ... }
--   c:request(method, params, { timeoutMs }) → result | nil, err;  c:notify(method, params)
--   c:shutdown() → true | nil, err
--
-- Positions are LSP's: 0-based line and UTF-16 character. The workspace is `root` resolved by
-- fs (its processPath is the server's cwd, its fileUrl the rootUri); a document outside it is
-- refused (LSP_OUTSIDE_WORKSPACE) and one larger than maxDocumentBytes too (LSP_TOO_LARGE).
-- Messages are Content-Length framed JSON-RPC (lua-cjson): one stdin write per message, and
-- one task reading stdout, so a request costs its write and nothing else — no polling.
-- Requests the server sends are answered (configuration: nulls; progress and registrations:
-- null; others: MethodNotFound). shutdown() sends shutdown and exit, closes stdin, and ends the
-- process tree if it has not exited within killGraceMs.
local cjson = require "cjson"
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"
local mb = require "moonbox"

local M = { name = "lsp", provides = "lsp", inject = { "fs", "subprocess" } }

local function positive(v) if v ~= v or v <= 0 or v == math.huge then return "must be a positive finite number" end end
local function whole(v) if v ~= v or v < 1 or v ~= math.floor(v) or v > 2 ^ 53 then return "must be a whole number of bytes" end end
M.schema = {
  root = { type = "string", check = function(v) if v == "" then return "must be a non-empty path" end end },
  command = { type = "string", default = "clangd" },
  args = { type = "table", default = {} },
  env = { type = "table", default = {} },
  maxDocumentBytes = { type = "number", default = 4 * 1024 * 1024, check = whole },
  maxMessageBytes = { type = "number", default = 64 * 1024 * 1024, check = whole },
  maxStderrBytes = { type = "number", default = 1024 * 1024, check = whole },
  requestTimeoutMs = { type = "number", default = 30000, check = positive },
  startTimeoutMs = { type = "number", default = 60000, check = positive },
  killGraceMs = { type = "number", default = 2000, check = positive },
}

-- File extension → LSP languageId (a client's `languageIds` adds to or replaces these).
M.language_ids = {
  c = "c", h = "c", cc = "cpp", cpp = "cpp", cxx = "cpp", hh = "cpp", hpp = "cpp", hxx = "cpp",
  m = "objective-c", mm = "objective-cpp", py = "python", lua = "lua", go = "go", rs = "rust",
  js = "javascript", mjs = "javascript", ts = "typescript", tsx = "typescriptreact",
  jsx = "javascriptreact", java = "java", sh = "shellscript", json = "json", md = "markdown",
}

local HEADER_MAX = 8192 -- a header block longer than this is not LSP

local function lsp_err(code, msg, fields) return errors.new(code, msg, fields) end

------------------------------------------------------------------------ framing
-- Content-Length framing, fed with arbitrary chunks. :push(chunk) → list of message bodies |
-- nil, err (the stream is not LSP or a message exceeds the cap).
local function framer(max_body)
  local f = { buf = "", need = nil, parts = nil, have = 0 }
  function f.push(chunk)
    local out = {}
    while #chunk > 0 do
      if f.need then
        local take = math.min(#chunk, f.need - f.have)
        f.parts[#f.parts + 1] = chunk:sub(1, take)
        f.have = f.have + take
        chunk = chunk:sub(take + 1)
        if f.have == f.need then
          out[#out + 1] = table.concat(f.parts)
          f.need, f.parts, f.have = nil, nil, 0
        end
      else
        f.buf = f.buf .. chunk
        chunk = ""
        local e = f.buf:find("\r\n\r\n", 1, true)
        if not e then
          if #f.buf > HEADER_MAX then return nil, "a header block longer than " .. HEADER_MAX .. " bytes" end
          break
        end
        local header, rest = f.buf:sub(1, e - 1), f.buf:sub(e + 4)
        f.buf = ""
        local len
        for line in (header .. "\r\n"):gmatch("(.-)\r\n") do
          local name, value = line:match("^([%w%-]+):%s*(.-)%s*$")
          if not name then return nil, ("a malformed header line %q"):format(line:sub(1, 80)) end
          if name:lower() == "content-length" then
            if not value:match("^%d+$") or #value > 15 then return nil, "Content-Length must be a whole number" end
            len = tonumber(value)
          end
        end
        if not len then return nil, "a message without Content-Length" end
        if len > max_body then return nil, ("a %d-byte message exceeds maxMessageBytes (%d)"):format(len, max_body) end
        f.need, f.parts, f.have = len, {}, 0
        if len == 0 then out[#out + 1] = "" f.need, f.parts = nil, nil end
        chunk = rest
      end
    end
    return out
  end
  return f
end
M.framer = framer

function M.encode(msg)
  local body = cjson.encode(msg)
  return ("Content-Length: %d\r\n\r\n%s"):format(#body, body)
end

-- file:// URL → path (percent-decoded), or nil when it is not a file URL.
local function uri_path(uri)
  if type(uri) ~= "string" then return nil end
  local p = uri:match("^file://[^/]*(/.*)$")
  if not p then return nil end
  return (p:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end
M.uri_path = uri_path

------------------------------------------------------------------------ the plugin
local LSP = {}
LSP.__index = LSP
local Client = {}
Client.__index = Client
M.LSP, M.Client = LSP, Client

-- The options of start (strict: anything else raises).
local START_FIELDS = { "root", "command", "args", "env", "initializationOptions", "languageIds", "maxDocumentBytes",
  "requestTimeoutMs", "startTimeoutMs" }
M.START_FIELDS = START_FIELDS

local function opt(o, c, k) if o[k] ~= nil then return o[k] end return c[k] end

function LSP:start(o)
  o = o or {}
  if type(o) ~= "table" then error("lsp:start: options must be a table", 2) end
  fields.only(o, START_FIELDS, "lsp:start", 2)
  local cfg = self.config
  local root_path = opt(o, cfg, "root")
  if type(root_path) ~= "string" or root_path == "" then
    error("lsp:start: root must be a non-empty path (in the call or the plugin's config)", 2)
  end
  local command, args, env = opt(o, cfg, "command"), opt(o, cfg, "args"), opt(o, cfg, "env")
  if type(command) ~= "string" or command == "" then error("lsp:start: command must be a non-empty string", 2) end
  if type(args) ~= "table" then error("lsp:start: args must be a list of strings", 2) end
  for i, a in ipairs(args) do
    if type(a) ~= "string" then error(("lsp:start: args[%d] must be a string"):format(i), 2) end
  end
  local max_doc = opt(o, cfg, "maxDocumentBytes")
  if type(max_doc) ~= "number" or whole(max_doc) then error("lsp:start: maxDocumentBytes must be a whole number of bytes", 2) end
  local req_timeout, start_timeout = opt(o, cfg, "requestTimeoutMs"), opt(o, cfg, "startTimeoutMs")
  for k, v in pairs({ requestTimeoutMs = req_timeout, startTimeoutMs = start_timeout }) do
    if type(v) ~= "number" or positive(v) then error("lsp:start: " .. k .. " must be a positive finite number", 2) end
  end
  if o.languageIds ~= nil and type(o.languageIds) ~= "table" then
    error("lsp:start: languageIds must be a table of extension = languageId", 2)
  end
  local fs, sp = self.fs, self.sp
  local root, rerr = fs:resolve(root_path)
  if not root then return nil, rerr end
  local info, serr = fs:stat(root)
  if info == nil then return nil, serr end
  if info == false then
    return nil, lsp_err("FS_NOT_FOUND", ("lsp: root %q does not exist"):format(root.displayPath))
  end
  if info.type ~= "directory" then
    return nil, lsp_err("FS_NOT_DIRECTORY", ("lsp: root %q is not a directory"):format(root.displayPath))
  end
  local exe, xerr = sp:resolveExecutable(command, env)
  if not exe then return nil, xerr end
  local argv = { exe }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  -- detached: the server belongs to the client (close, dispose), not to the task that opened it
  local h, herr = sp:spawn{ argv = argv, cwd = fs:processPath(root), env = env, graceMs = cfg.killGraceMs, detached = true,
    stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = math.tointeger(cfg.maxStderrBytes) } } }
  if not h then return nil, herr end
  local c = setmetatable({ owner = self, fs = fs, h = h, pid = h.pid, root = root, rootUri = fs:fileUrl(root),
    command = command, seq = 0, pending = {}, docs = {}, names = {}, languageIds = o.languageIds or {},
    timeout = req_timeout, max_doc = max_doc }, Client)
  self.clients[c] = true
  c.reader = mb.spawn(function() c:_read() end)
  local caps = {
    general = { positionEncodings = { "utf-16" } },
    textDocument = {
      synchronization = { dynamicRegistration = false, didSave = false, willSave = false },
      hover = { contentFormat = { "markdown", "plaintext" } },
      definition = { linkSupport = true },
      publishDiagnostics = { relatedInformation = true, versionSupport = true },
    },
    workspace = { configuration = true, workspaceFolders = true },
    window = { workDoneProgress = false },
  }
  local init, ierr = c:request("initialize", {
    processId = cjson.null, clientInfo = { name = "moonbox" }, rootUri = c.rootUri,
    rootPath = fs:processPath(root), workspaceFolders = { { uri = c.rootUri, name = root.displayPath } },
    capabilities = caps, initializationOptions = o.initializationOptions,
  }, { timeoutMs = start_timeout })
  if not init then c:shutdown() return nil, ierr end
  c.capabilities = init.capabilities
  local ok, nerr = c:notify("initialized", {})
  if not ok then c:shutdown() return nil, nerr end
  return c
end

function LSP:dispose()
  local first
  for c in pairs(self.clients) do
    local ok, err = c:shutdown()
    if not ok then first = first or err end
  end
  if first then return nil, first end
  return true
end

------------------------------------------------------------------------ the client
-- Why the server is gone, with the tail of what it printed on stderr.
function Client:_gone_error()
  if self.gone then return self.gone end
  local why = self.read_error and ("its output failed: " .. tostring(self.read_error.message or self.read_error))
    or "it exited"
  local tail = ""
  local col = self.h.collected.stderr
  if col then
    local r = col:readFrom(0)
    tail = r.text:sub(-2000)
  end
  self.gone = lsp_err("LSP_SERVER_EXITED", ("lsp: %s: %s%s"):format(self.command, why,
    tail ~= "" and ("; stderr: " .. tail) or ""), { cause = self.read_error })
  return self.gone
end

-- The stdout task: frames in, responses to their waiters, notifications and server requests
-- handled; at the end every waiter fails with the reason.
function Client:_read()
  local fr = framer(math.tointeger(self.owner.config.maxMessageBytes))
  while true do
    local chunk, err = self.h.stdout:read()
    if not chunk then self.read_error = err break end
    local bodies, ferr = fr.push(chunk)
    if not bodies then
      self.read_error = lsp_err("LSP_PROTOCOL", "lsp: " .. self.command .. " broke the framing: " .. ferr)
      self.gone = self.read_error
      self.h:terminate()
      break
    end
    for _, body in ipairs(bodies) do self:_dispatch(body) end
  end
  self.ended = true
  local e = self:_gone_error()
  for id, w in pairs(self.pending) do
    self.pending[id] = nil
    w.ev:set(nil, e)
  end
  for _, d in pairs(self.docs) do d.ev:set(true) end
end

function Client:_dispatch(body)
  local ok, msg = pcall(cjson.decode, body)
  if not ok or type(msg) ~= "table" then self.bad = (self.bad or 0) + 1 return end
  local id = msg.id
  if msg.method == nil then                       -- a response
    local w = id ~= nil and self.pending[math.tointeger(id) or id]
    if not w then return end
    self.pending[w.id] = nil
    if msg.error and msg.error ~= cjson.null then
      local e = msg.error
      w.ev:set(nil, lsp_err("LSP_RESPONSE_ERROR", ("lsp: %s %s failed: %s"):format(self.command, w.method,
        tostring(type(e) == "table" and e.message or e)), { lsp_code = type(e) == "table" and e.code or nil,
        data = type(e) == "table" and e.data or nil }))
    else
      w.ev:set(msg.result == nil and cjson.null or msg.result)
    end
  elseif id ~= nil and id ~= cjson.null then      -- a request from the server
    self:_answer(msg)
  elseif msg.method == "textDocument/publishDiagnostics" and type(msg.params) == "table" then
    local p = uri_path(msg.params.uri)
    local d = p and self.docs[p]
    if d then
      local v = math.tointeger(msg.params.version)
      d.diagnostics, d.diag_version = msg.params.diagnostics, v or d.version
      local ev = d.ev
      d.ev = mb.event()
      ev:set(true)
    end
  end
end

function Client:_answer(msg)
  local result, err = cjson.null, nil
  if msg.method == "workspace/configuration" then
    result = {}
    local items = type(msg.params) == "table" and msg.params.items or {}
    for i = 1, #items do result[i] = cjson.null end
    if #result == 0 then result = cjson.null end
  elseif msg.method == "window/workDoneProgress/create" or msg.method == "client/registerCapability"
    or msg.method == "client/unregisterCapability" or msg.method == "window/showMessageRequest" then
    result = cjson.null
  elseif msg.method == "workspace/workspaceFolders" then
    result = { { uri = self.rootUri, name = self.root.displayPath } }
  else
    err = { code = -32601, message = "moonbox does not handle " .. tostring(msg.method) }
  end
  self:_send(err and { jsonrpc = "2.0", id = msg.id, error = err } or { jsonrpc = "2.0", id = msg.id, result = result })
end

function Client:_send(msg)
  if self.ended or self.stdin_closed then return nil, self:_gone_error() end
  self.writes = (self.writes or 0) + 1
  local ok, err = self.h.stdin:write(M.encode(msg))
  if ok then return true end
  -- a server that died takes its stdin with it: say that, with its stderr, once its output ended
  if self.reader:join(self.owner.config.killGraceMs) and self.ended then return nil, self:_gone_error() end
  return nil, err
end

function Client:notify(method, params)
  if type(method) ~= "string" then error("lsp:notify: method must be a string", 2) end
  return self:_send({ jsonrpc = "2.0", method = method, params = params })
end

-- → result (cjson.null for a null result) | nil, err. A canceled caller sends $/cancelRequest.
-- { timeoutMs }: a request's own timeout (else the client's requestTimeoutMs).
local function call_opts(o, what)
  o = o or {}
  if type(o) ~= "table" then error(what .. ": options must be a table { timeoutMs }", 3) end
  fields.only(o, { "timeoutMs" }, what, 3)
  local t = o.timeoutMs
  if t ~= nil and (type(t) ~= "number" or t ~= t or t <= 0 or t == math.huge) then
    error(what .. ": timeoutMs must be a positive finite number of milliseconds", 3)
  end
  return o
end

function Client:request(method, params, o)
  if type(method) ~= "string" then error("lsp:request: method must be a string", 2) end
  o = call_opts(o, "lsp:request")
  if self.ended then return nil, self:_gone_error() end
  self.seq = self.seq + 1
  local id = self.seq
  local w = { id = id, method = method, ev = mb.event() }
  self.pending[id] = w
  local ok, err = self:_send({ jsonrpc = "2.0", id = id, method = method, params = params })
  if not ok then self.pending[id] = nil return nil, err end
  local timeout = o.timeoutMs or self.timeout
  local r, rerr = w.ev:wait(timeout)
  if r == nil and self.pending[id] then
    self.pending[id] = nil
    if not self.ended then self:_send({ jsonrpc = "2.0", method = "$/cancelRequest", params = { id = id } }) end
    if rerr and rerr.code == "MB_TIMEOUT" then
      return nil, lsp_err("LSP_TIMEOUT", ("lsp: %s %s: no response within %d ms"):format(self.command, method, timeout))
    end
  end
  return r, rerr
end

------------------------------------------------------------------------ documents
-- path → its target inside the workspace and its text (read through fs, capped).
function Client:_document(path)
  if type(path) ~= "string" or path == "" then error("lsp: path must be a non-empty string", 3) end
  local fs = self.fs
  local t, err = fs:resolve(path, { cwd = fs:processPath(self.root) })
  if not t then return nil, err end
  if not fs:contains(self.root, t) then
    return nil, lsp_err("LSP_OUTSIDE_WORKSPACE", ("lsp: %q resolves outside the workspace %q"):format(path,
      self.root.displayPath))
  end
  local it, serr = fs:streamText(t)
  if not it then return nil, serr end
  local parts, n, max = {}, 0, self.max_doc
  while true do
    local s, rerr = it.next()
    if not s then
      if rerr then return nil, rerr end
      break
    end
    n = n + #s
    if n > max then
      it.close()
      return nil, lsp_err("LSP_TOO_LARGE", ("lsp: %q is larger than maxDocumentBytes (%d)"):format(path, max))
    end
    parts[#parts + 1] = s
  end
  return t, table.concat(parts)
end

function Client:_language(key)
  local ext = key:match("%.([%w]+)$")
  ext = ext and ext:lower()
  return self.languageIds[ext] or M.language_ids[ext] or "plaintext"
end

function Client:open(path)
  local t, text = self:_document(path)
  if not t then return nil, text end
  local key = self.fs:processPath(t)
  local d = self.docs[key]
  if d then return self:change(path) end
  d = { key = key, uri = self.fs:fileUrl(t), version = 1, ev = mb.event() }
  self.docs[key] = d
  self.names[path] = d
  local ok, err = self:notify("textDocument/didOpen", { textDocument = { uri = d.uri,
    languageId = self:_language(key), version = d.version, text = text } })
  if not ok then self.docs[key] = nil return nil, err end
  return d.uri
end

-- The document's current text from fs, as a full-content change.
function Client:change(path)
  local t, text = self:_document(path)
  if not t then return nil, text end
  local d = self.docs[self.fs:processPath(t)]
  if not d then return self:open(path) end
  d.version = d.version + 1
  local ok, err = self:notify("textDocument/didChange", { textDocument = { uri = d.uri, version = d.version },
    contentChanges = { { text = text } } })
  if not ok then return nil, err end
  return d.uri
end

-- An open document by the name it was opened with (no fs round trip), else by its resolved path.
function Client:_doc(path)
  if type(path) ~= "string" or path == "" then error("lsp: path must be a non-empty string", 3) end
  local d = self.names[path]
  if d and self.docs[d.key] == d then return d end
  local t, err = self.fs:resolve(path, { cwd = self.fs:processPath(self.root) })
  if not t then return nil, err end
  d = self.docs[self.fs:processPath(t)]
  if not d then return nil, lsp_err("LSP_NOT_OPEN", ("lsp: %q is not open (call open first)"):format(path)) end
  return d
end

function Client:closeDocument(path)
  local d, err = self:_doc(path)
  if not d then return nil, err end
  self.docs[d.key] = nil
  for name, v in pairs(self.names) do if v == d then self.names[name] = nil end end
  return self:notify("textDocument/didClose", { textDocument = { uri = d.uri } })
end

-- The diagnostics the server published for the document's current version (waits for them).
function Client:diagnostics(path, o)
  o = call_opts(o, "lsp:diagnostics")
  local d, err = self:_doc(path)
  if not d then return nil, err end
  local m = mb
  local deadline = m.now() + (o.timeoutMs or self.timeout)
  while not (d.diagnostics and d.diag_version and d.diag_version >= d.version) do
    if self.ended then return nil, self:_gone_error() end
    local left = deadline - m.now()
    if left <= 0 then
      return nil, lsp_err("LSP_TIMEOUT", ("lsp: no diagnostics for %q within %d ms"):format(path, o.timeoutMs or self.timeout))
    end
    local ok, werr = d.ev:wait(left)
    if ok == nil and werr.code == "MB_CANCELED" then return nil, werr end
  end
  return d.diagnostics
end

local function check_pos(pos)
  if type(pos) ~= "table" or math.type(pos.line) ~= "integer" or math.type(pos.character) ~= "integer"
    or pos.line < 0 or pos.character < 0 then
    error("lsp: position must be { line = n, character = n } (0-based integers)", 3)
  end
end

function Client:hover(path, pos)
  check_pos(pos)
  local d, err = self:_doc(path)
  if not d then return nil, err end
  local r, rerr = self:request("textDocument/hover", { textDocument = { uri = d.uri }, position = pos })
  if r == nil then return nil, rerr end
  if r == cjson.null then return false end
  return r
end

-- → list of { uri, path (nil for a non-file URL), range }
function Client:definition(path, pos)
  check_pos(pos)
  local d, err = self:_doc(path)
  if not d then return nil, err end
  local r, rerr = self:request("textDocument/definition", { textDocument = { uri = d.uri }, position = pos })
  if r == nil then return nil, rerr end
  if r == cjson.null then return {} end
  if r.uri or r.targetUri then r = { r } end
  local out = {}
  for _, l in ipairs(r) do
    local uri = l.uri or l.targetUri
    out[#out + 1] = { uri = uri, path = uri_path(uri), range = l.range or l.targetSelectionRange or l.targetRange }
  end
  return out
end

-- shutdown, exit, stdin closed; the tree ended after killGraceMs if it is still there.
function Client:shutdown()
  if self.closed then return self.close_result, self.close_error end
  self.closed = true
  self.owner.clients[self] = nil
  local grace = self.owner.config.killGraceMs
  if not self.ended then
    local r = self:request("shutdown", cjson.null, { timeoutMs = grace })
    if r ~= nil then self:notify("exit", cjson.null) end
  end
  if not self.stdin_closed then self.stdin_closed = true self.h.stdin:close() end
  local o = self.h:exited(grace)
  local ok, err = true, nil
  if not o then
    ok, err = self.h:terminate()
    if ok then self.h:waitForExit(grace + 5000) end
  end
  self.reader:join(grace)
  self.close_result, self.close_error = ok, err
  return ok, err
end

function M.new(ctx, config)
  assert(ctx.fs and ctx.subprocess, "lsp: fs and subprocess providers must load first")
  return setmetatable({ fs = ctx.fs, sp = ctx.subprocess, config = config, clients = {} }, LSP)
end

return M
