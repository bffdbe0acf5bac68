-- moonbox.http — the HTTP transport (libcurl multi on the loop) for tasks.
--   http.request{...} → { status, headers, body } | nil, err        (see lua/README.md)
--   http.stream{...}  → stream (s.status, s.headers, s:read, s:close, s:info) | nil, err
-- Header names in results are lower-case. Transport failures are E2B_* errors; a task's cancel
-- is MB_CANCELED.
local core = require "moonbox.core"
local sched = require "moonbox.sched"
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"

local M = {}
local WEAK_V = { __mode = "v" }

-- What core.http_request reads (core/lua_http.c); anything else is a typo.
local OPTIONS = { "url", "method", "headers", "body", "body_file", "body_fd", "body_source", "stream", "max_bytes",
  "buffer_bytes", "timeout_ms", "connect_timeout_ms", "idle_timeout_ms", "ca_file", "connect_to" }

-- One wake-up closure per task for unary requests: a request is always closed before
-- request() returns, so no notification of an older request can reach a later wait.
local function waker(t)
  local cb = t.http_cb
  if not cb then
    local key = {}
    cb = function() sched.wake(t, key, true) end
    t.http_cb, t.http_key = cb, key
  end
  return cb, t.http_key
end

-- Unary request. opts: url, method, headers, body (string or list of strings, sent as they
-- are), body_file, max_bytes (required), timeout_ms, connect_timeout_ms, ca_file.
function M.request(opts)
  if type(opts) ~= "table" then error("http.request: opts must be a table", 2) end
  fields.only(opts, OPTIONS, "http.request", 2)
  local t = sched.need_task("http.request", 2)
  local cb, key = waker(t)
  local req, err = core.http_request(opts, cb, false)
  if not req then return nil, err end
  while not req:done() do
    if sched.block(t, nil, key) == sched.CANCEL then
      req:close()
      return nil, sched.canceled_err("http request")
    end
  end
  local status, headers, body = req:result()
  req:close()
  if not status then return nil, headers end
  return { status = status, headers = headers, body = body }
end

local Stream = {}
Stream.__index = Stream
M.OPTIONS, M.Stream = OPTIONS, Stream

-- Streaming request: returns once the response headers are in (timeout_ms bounds that wait).
function M.stream(opts)
  if type(opts) ~= "table" then error("http.stream: opts must be a table", 2) end
  fields.only(opts, OPTIONS, "http.stream", 2)
  local t = sched.need_task("http.stream", 2)
  local s = setmetatable({ closed = false }, Stream)
  -- The C side keeps the callback alive; reaching s only weakly lets a stream that was
  -- dropped without close() be collected (its request's __gc then cancels the transfer).
  local weak = setmetatable({ s }, WEAK_V)
  local req, err = core.http_request(opts, function()
    local st = weak[1]
    local w = st and st.waiter
    if w then sched.wake(w, st, true) end
  end, true)
  if not req then return nil, err end
  s.req = req
  while req:status() == nil and not req:done() do
    s.waiter = t
    local r = sched.block(t, nil, s)
    s.waiter = nil
    if r == sched.CANCEL then s:close(); return nil, sched.canceled_err("http stream") end
  end
  if req:status() == nil then
    local e = req:error()
    s:close()
    return nil, e or errors.new("E2B_PROTOCOL", "no response")
  end
  s.status, s.headers = req:status(), req:headers()
  return s
end

-- → chunk | nil (end of body) | nil, err (transport error, MB_TIMEOUT, MB_CANCELED)
function Stream:read(timeout_ms)
  sched.check_timeout(timeout_ms, 2)
  if self.closed then return nil, errors.new("MB_CLOSED", "stream is closed") end
  local t = sched.need_task("stream:read", 2)
  if self.waiter then error("stream:read: another task is already reading this stream", 2) end
  while true do
    local req = self.req
    local chunk = req:read()
    if chunk then return chunk end
    if req:done() then
      local e = req:error()
      if e then return nil, e end
      return nil
    end
    self.waiter = t
    local r = sched.block(t, timeout_ms, self)
    self.waiter = nil
    if r == sched.TIMEOUT then return nil, sched.timeout_err("stream read", timeout_ms) end
    if r == sched.CANCEL then return nil, sched.canceled_err("stream read") end
    if self.closed then return nil, errors.new("MB_CLOSED", "stream is closed") end
  end
end

-- Transfer counters of this stream: received, buffered, max_buffered, pauses, paused.
function Stream:info()
  if self.closed then return nil end
  return self.req:info()
end

function Stream:close()
  if self.closed then return end
  self.closed = true
  self.req:close()
  local w = self.waiter
  if w then sched.wake(w, self, true) end
end

-- {requests=, connects=, active=} counted at the transport (benchmarks, leak checks).
function M.stats() return core.http_stats() end

return M
