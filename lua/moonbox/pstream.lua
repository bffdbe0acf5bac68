-- moonbox.pstream — a process stream decoded in C on the loop (core.pstream), for tasks.
--
--   local s, err = pstream.open(http_opts, cfg)
--     cfg = { stdout = sink, stderr = sink, raw = bool, max_message =, max_line =, high_water = }
--     sink: "discard" | "pipe" | { tail = maxBytes } | { fd = n }
--   s:next_facts(timeout_ms) → non-empty list of facts | nil (closed: no more) | nil, err
--   s:read(stream, timeout_ms) → bytes | nil (end of that stream) | nil, err     (pipe sinks)
--   s:wait_closed(timeout_ms)  → true | nil, err;   s:result() → true | nil, err (once closed)
--   s:read_from(stream, offset), s:total(stream), s:discard(stream), s:seal(stream), s:diag(), s:info(),
--   s:status(), s:error_body(), s:cancel(), s:close()
--   cfg.fallback = fn(status, error_body) → http_opts, cfg | nil: asked once when the server
--     answers with an error before any output (a codec it refuses); what it returns is opened
--     in place, behind the same object.
--
-- The C side decodes every byte as it arrives and wakes this object only when it has
-- something: control facts, bytes for a reader that waits, the end. A task blocked here is
-- resumed a handful of times per command, not once per chunk of output.
local core = require "moonbox.core"
local sched = require "moonbox.sched"
local errors = require "moonbox.errors"

local M = {}
local WEAK_V = { __mode = "v" }
local open_streams = setmetatable({}, { __mode = "k" }) -- stream → { url, started } (debugging)
local Stream = {}
Stream.__index = Stream

local function closed_err() return errors.new("MB_CLOSED", "process stream is closed") end

local function new(start, what, cfg)
  local s = setmetatable({ waiters = {} }, Stream)
  -- The C side holds the callback; it reaches s weakly, so a stream dropped without close()
  -- is collected and its __gc cancels the transfer (a local process is TERMed).
  local weak = setmetatable({ s }, WEAK_V)
  s.wake = function()
    local st = weak[1]
    if st then sched.wake_all(st.waiters, st, true) end
  end
  local c, err = start(s.wake)
  if not c then return nil, err end
  s.c = c
  open_streams[s] = { url = what, started = sched.now(), tag = cfg.tag }
  return s
end

-- An envd process stream over HTTP. → stream | nil, err (the request could not start)
function M.open(http_opts, cfg)
  local s, err = new(function(cb) return core.pstream(http_opts, cfg, cb) end, http_opts.url, cfg)
  if s then s.fallback = cfg.fallback end
  return s, err
end

-- A stream the server refused before any output is reopened as cfg.fallback says (in the
-- task, never from the loop's callback). → true when it was.
function Stream:_refused()
  local fb = self.fallback
  if not fb or self.freed or not self.c:closed() then return false end
  local status = self.c:status()
  if status == nil or status == 200 then self.fallback = nil return false end
  self.fallback = nil
  local opts, cfg = fb(status, self.c:error_body())
  if not opts then return false end
  local c = core.pstream(opts, cfg, self.wake)
  if not c then return false end
  self.c:close()
  self.c = c
  return true
end

-- A process on this host: spawn = { argv (argv[1] absolute), env = {NAME = value}, cwd,
-- stdin_pipe, pty, rows, cols }; its stdout is an mbwrap frame stream (cfg.raw or pty: plain
-- bytes). The same facts as envd's (start, end...). → stream | nil, err
function M.spawn(spawn, cfg)
  return new(function(cb) return core.pstream_spawn(spawn, cfg, cb) end, "local:" .. tostring(spawn.argv[1]), cfg)
end

-- Local sources: the process's pid, a signal to it, input to its stdin or PTY (returns once it
-- was written: the process read it), EOF on stdin, a PTY's size.
function Stream:pid() return self.c:pid() end
function Stream:kill(sig) return self.c:kill(sig) end
function Stream:write(data, timeout_ms)
  local ok, err = self.c:write(data, math.max(#data, 1 << 20))
  if not ok then return nil, err end
  while self.c:write_pending() > 0 do
    if self.freed then return nil, closed_err() end
    self.c:want_write()
    local werr = self:_wait(timeout_ms, "process stream write")
    if werr then return nil, werr end
    if self.freed then return nil, closed_err() end
  end
  return true
end
function Stream:close_input() return self.c:close_input() end
function Stream:resize(rows, cols) return self.c:resize(rows, cols) end

-- Streams not yet freed (watchdogs, leak checks): a list of { url, started, tag, closed }.
function M.open_streams()
  local out = {}
  for s, info in pairs(open_streams) do
    if not s.freed then
      out[#out + 1] = { url = info.url, started = info.started, tag = info.tag, closed = s.c:closed() == true }
    end
  end
  return out
end

-- Blocks until the C side reports a change. → nil | err (timeout, cancel)
function Stream:_wait(timeout_ms, what)
  return sched.wait_on(self, self.waiters, sched.need_task(what, 3), timeout_ms, what)
end

function Stream:next_facts(timeout_ms)
  while true do
    if self.freed then return nil, closed_err() end
    local f = self.c:facts()
    if #f > 0 then return f end
    if self.c:closed() and not self:_refused() then return nil end
    local err = not self.c:closed() and self:_wait(timeout_ms, "process stream")
    if err then return nil, err end
  end
end

function Stream:read(stream, timeout_ms)
  while true do
    if self.freed then return nil, closed_err() end
    local b = self.c:read(stream)
    if b then return b end
    if b == nil and not self:_refused() then return nil end
    self.c:want(stream)
    local err = self:_wait(timeout_ms, "process stream read")
    if err then return nil, err end
  end
end

function Stream:wait_closed(timeout_ms)
  while true do
    if self.freed then return nil, closed_err() end
    if self.c:closed() and not self:_refused() then return self:result() end
    local err = not self.c:closed() and self:_wait(timeout_ms, "process stream")
    if err then return nil, err end
  end
end

-- How the stream ended: true | nil, err (transport, HTTP status, decoding) | nil when open.
function Stream:result()
  self:_refused()
  local closed, err = self.c:closed()
  if not closed then return nil end
  if err then return nil, err end
  return true
end

function Stream:read_from(stream, offset) return self.c:read_from(stream, offset) end
function Stream:total(stream) return self.c:total(stream) end
function Stream:diag() return self.c:diag() end
function Stream:info() return self.c:info() end
function Stream:status() return self.c:status() end
function Stream:error_body() return self.c:error_body() end
function Stream:closed() return (self.c:closed()) end

-- Output nobody wants any more: dropped as it comes (the control facts keep flowing).
function Stream:discard(stream)
  if not self.freed then self.c:discard(stream) end
end

-- A pipe takes no more output; what it holds stays readable (and no longer holds back facts).
function Stream:seal(stream)
  if not self.freed then self.c:seal(stream) end
end

function Stream:cancel()
  if not self.freed then self.c:cancel() end
end

-- Frees the C side (cancels what still runs); waiters get MB_CLOSED.
function Stream:close()
  if self.freed then return end
  self.freed = true
  self.c:close()
  sched.wake_all(self.waiters, self, true)
end

return M
