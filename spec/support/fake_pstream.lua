-- A stand-in for moonbox.pstream in unit specs: the same interface, fed by a script of
-- envd messages through the real C decoder (core.procstream), on whatever `require "moonbox"`
-- is (the fake clock of support.fake_mb, or the real scheduler).
-- Script items: an envd message table (sent as one envelope), { raw = bytes }, { sleep = ms },
-- { err = e } (the transfer fails with e: nothing follows), { status = n, body = s } (an error
-- answer instead of a stream). An end-of-stream envelope follows the last item unless the
-- script ends in { err } or { no_end = true }. Like the real one, the script stops (the
-- transfer is paused) while a pipe that is neither sealed nor discarded holds cfg.high_water
-- bytes (default 256 KiB) or more.
local cjson = require "cjson"

local M = {}
local Stream = {}
Stream.__index = Stream

local function mb() return require "moonbox" end
local function envelope(flags, payload) return require("moonbox.core").envelope(flags, payload) end

local function sink(v)
  if v == "pipe" then return "queue" end
  if type(v) == "table" and v.fd then return "queue" end
  return v
end

function M.open(items, cfg)
  local core = require "moonbox.core"
  cfg = cfg or {}
  local d = core.procstream{ max_message = cfg.max_message, max_line = cfg.max_line, raw = cfg.raw,
    stdout = sink(cfg.stdout), stderr = sink(cfg.stderr) }
  local s = setmetatable({ d = d, cfg = cfg, ev = mb().event(), fd_output = {}, kinds = {}, held = {},
    reads = 0, status_code = 200, ebody = "" }, Stream)
  for _, k in ipairs({ "stdout", "stderr" }) do
    local v = cfg[k]
    s.kinds[k] = v == "pipe" and "pipe" or (type(v) == "table" and v.fd and "fd") or "other"
  end
  s.pump = mb().spawn(function() s:_pump(items) end)
  return s
end

function Stream:_changed()
  local ev = self.ev
  self.ev = mb().event()
  ev:set(true)
end

-- Pipe bytes decoded so far move from the C queue to `held` (what a reader has not taken).
function Stream:_take(kind)
  local b = self.d:read(kind)
  if b then self.held[kind] = (self.held[kind] or "") .. b end
end

function Stream:_drain_fds()
  for k, kind in pairs(self.kinds) do
    if kind == "fd" then
      local b = self.d:read(k)
      if b then
        local fd = self.cfg[k].fd
        self.fd_output[fd] = (self.fd_output[fd] or "") .. b
      end
    end
  end
end

function Stream:_pump(items)
  local ended_with_err = false
  for _, it in ipairs(items) do
    while not self.canceled and self:_backlog() >= (self.cfg.high_water or 262144) do self:_wait() end
    if self.canceled then break end
    if it.sleep then mb().sleep(it.sleep)
    elseif it.err then
      self.err = it.err
      ended_with_err = true
      break
    elseif it.status then
      self.status_code, self.ebody = it.status, it.body or ""
      self.err = { code = "E2B_HTTP", message = "HTTP " .. it.status }
      ended_with_err = true
      break
    elseif it.no_end then
      ended_with_err = true
    else
      local chunk = it.raw or envelope(0, cjson.encode(it))
      local ok, perr = self.d:push(chunk)
      if not ok then self.err = perr; ended_with_err = true; break end
      self:_drain_fds()
      for k, kind in pairs(self.kinds) do
        if kind == "pipe" then
          if self.sealed and self.sealed[k] then self.d:read(k) else self:_take(k) end
        end
      end
    end
    self:_changed()
  end
  if self.canceled and not self.err then self.err = require("moonbox.errors").new("MB_CANCELED", "canceled by the caller") end
  if not ended_with_err and not self.err then
    local ok, perr = self.d:push(envelope(2, "{}"))
    if not ok then self.err = perr end
  end
  if not self.err then
    local ok, ferr = self.d:finish()
    if not ok then self.err = ferr end
  end
  self:_drain_fds()
  self.closed_ = true
  self:_changed()
end

function Stream:_backlog()
  local n = 0
  for k, kind in pairs(self.kinds) do
    if kind == "pipe" and not (self.sealed and self.sealed[k]) then
      n = math.max(n, #(self.held[k] or ""))
    end
  end
  return n
end

function Stream:_wait(timeout_ms)
  local ok, err = self.ev:wait(timeout_ms or 2147483647)
  if ok == nil then return err end
end

function Stream:next_facts(timeout_ms)
  while true do
    local f = self.d:facts()
    if #f > 0 then return f end
    if self.closed_ then return nil end
    local err = self:_wait(timeout_ms)
    if err then return nil, err end
  end
end

function Stream:read(kind, timeout_ms)
  while true do
    self.reads = self.reads + 1
    if self.kinds[kind] == "pipe" then
      self:_take(kind)
      local b = self.held[kind]
      if b and b ~= "" then
        self.held[kind] = ""
        self:_changed()
        return b
      end
    end
    if self.closed_ or self.kinds[kind] ~= "pipe" or (self.sealed and self.sealed[kind]) then return nil end
    local err = self:_wait(timeout_ms)
    if err then return nil, err end
  end
end

function Stream:wait_closed(timeout_ms)
  while not self.closed_ do
    local err = self:_wait(timeout_ms)
    if err then return nil, err end
  end
  return self:result()
end

function Stream:result()
  if not self.closed_ then return nil end
  if self.err then return nil, self.err end
  return true
end

function Stream:read_from(kind, offset) return self.d:read_from(kind, offset) end
function Stream:total(kind) return self.d:total(kind) end
function Stream:diag() return self.d:diag() end
function Stream:status() return self.status_code end
function Stream:error_body() return self.ebody end
function Stream:closed() return self.closed_ == true end
function Stream:info() return { received = 0, pauses = 0, max_buffered = 0, paused = false } end
function Stream:discard(kind)
  self.d:discard(kind)
  self.held[kind] = nil
  self.discarded = self.discarded or {}
  self.discarded[kind] = true
  self.kinds[kind] = "other"
  self:_changed()
end
function Stream:seal(kind)
  self.sealed = self.sealed or {}
  self.sealed[kind] = true
  self:_changed()
end
function Stream:cancel() self.canceled = true end
function Stream:close() self.canceled = true; self.closed_ = self.closed_ or false end

return M
