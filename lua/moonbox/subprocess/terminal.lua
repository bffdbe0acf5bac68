-- moonbox.subprocess.terminal — one interactive terminal in an execution world: the handle that
-- ctx.subprocess:spawnTerminal returns.
--
-- `mbwrap exec -K NAME... -- argv` runs on a new PTY (E2B: one process.Process/Start with a
-- PTY; on the host: openpty): the environment travels out of band (never on a command line)
-- and mbwrap keeps exactly those names. The PTY's bytes are decoded in C (a raw process
-- stream) into a byte queue that :read serves. inspectForeground / signalForeground /
-- terminate use mbwrap fg / signal / killsession (one request each).
local errors = require "moonbox.errors"
local sched = require "moonbox.sched"
local specs = require "moonbox.subprocess.spec"
local events = require "moonbox.events"
local handle_mod = require "moonbox.subprocess.handle"

local M = {}
local Term = {}
Term.__index = Term
M.Term = Term

local METHOD = "process.Process/Start"


-- fields: sp, sb, graceMs, s (the raw process stream)
function M.new(fields)
  local t = setmetatable(fields, Term)
  t.inflight = 0
  t.done_ev, t.started, t.start_seen, t.term_ev = events.event(), events.event(), events.event(), events.event()
  return t
end

function Term:_op(fn)
  if self.closing then return nil, errors.new("TERMINAL_CLOSED", "terminal is terminating") end
  self.inflight = self.inflight + 1
  local r = table.pack(pcall(fn))
  self.inflight = self.inflight - 1
  if self.inflight == 0 and self.idle_ev then self.idle_ev:set(true) end
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function Term:write(data)
  if type(data) ~= "string" then error("terminal:write: data must be a string", 2) end
  if self.exited then return nil, errors.new("TERMINAL_EXITED", "terminal process has exited") end
  return self:_op(function() return self.sb:send_input(self.s, self.pid, data, true) end)
end

function Term:resize(rows, cols)
  if math.type(rows) ~= "integer" or math.type(cols) ~= "integer" or rows < 1 or cols < 1 or rows > 65535 or cols > 65535 then
    error("terminal:resize: rows and cols must be integers from 1 to 65535", 2)
  end
  return self:_op(function() return self.sb:resize(self.s, self.pid, rows, cols) end)
end

function Term:_fg()
  local out, err = self.sb:tool({ "fg", tostring(self.pid) })
  if not out then return nil, err end
  if out == "absent\n" then return false end
  local pg, iw = out:match("^(%-?%d+) ([01])\n$")
  if not pg then return nil, errors.new("E2B_PROTOCOL", "mbwrap fg: malformed output") end
  return { processGroupId = math.tointeger(tonumber(pg)), inputWaiting = iw == "1" }
end

-- → { processGroupId, inputWaiting } | false (the top level has exited) | nil, err
function Term:inspectForeground()
  if self.exited then return false end
  return self:_op(function() return self:_fg() end)
end

-- → the process-group id that received the signal | nil, err
function Term:signalForeground(sig)
  if not specs.TERMINAL_SIGNALS[sig] then error("signalForeground: unsupported signal " .. tostring(sig), 2) end
  return self:_op(function()
    local fg, err = self:_fg()
    if not fg then return nil, err or errors.new("TERMINAL_EXITED", "terminal process has exited") end
    local pg = fg.processGroupId
    if pg <= 1 then return nil, errors.new("TERMINAL_NO_FOREGROUND", "terminal has no foreground process group") end
    if sig == "SIGKILL" and pg == self.pid then
      return nil, errors.new("TERMINAL_REFUSED", "refusing to SIGKILL the terminal shell; terminate the terminal session instead")
    end
    local _, serr = self.sb:tool({ "signal", tostring(pg), sig })
    if serr then return nil, serr end
    return pg
  end)
end

-- Output: :read(timeout) → bytes | nil (ended after the top-level exit) | nil, err
function Term:read(timeout_ms)
  local v, err = self.s:read("stdout", timeout_ms)
  if v == nil and err == nil then return nil, self.error end
  return v, err
end

function Term:wait(timeout_ms)
  local ok, err = self.done_ev:wait(timeout_ms)
  if not ok and not self.exited then return nil, err end
  if self.error then return nil, self.error end
  return self.outcome
end
Term.done = Term.wait

-- A failed terminate(): callers waiting on this attempt get err; a later call tries again.
function Term:_terminate_failed(err)
  self.terminating, self.closing = false, false
  self.term_error = err
  self.term_ev:set(true); self.term_ev = events.event()
  return nil, err
end

-- TERM every process of the session, KILL after the grace, until it is empty (inside the
-- sandbox, one request), then wait for the top level. Idempotent; in-flight calls finish first.
function Term:terminate()
  if self.terminated then return true end
  if self.terminating then
    self.term_ev:wait()
    if self.terminated then return true end
    return nil, self.term_error
  end
  self.terminating = true
  self.closing = true
  self.s:discard("stdout")           -- unread output must not keep the facts from the exit
  if self.inflight > 0 then
    self.idle_ev = events.event()
    self.idle_ev:wait()
  end
  local _, err = self.sp:_killsession(self.sb, self.pid, self.graceMs)
  if err and not handle_mod.sandbox_gone(err) then return self:_terminate_failed(err) end
  -- quiescence includes the top level: its exit must be observed on the stream
  local seen, werr = self.done_ev:wait(self.sp.timeouts.request_ms)
  if seen == nil and not self.exited then
    return self:_terminate_failed(errors.new("TERMINAL_TEARDOWN",
      "terminal session killed but its exit was not observed: " .. tostring(werr), { cause = werr }))
  end
  self.terminated = true
  self.term_ev:set(true)
  self.sp.terminals[self] = nil
  sched.forget(self.owner, self)
  return true
end

-- The fact task: start, end, the stream's close.
function Term:_run()
  local s = self.s
  while true do
    local facts, err = s:next_facts()
    if not facts then
      if err then self.error = err end
      break
    end
    for _, f in ipairs(facts) do
      if f.kind == "start" then
        self.pid = math.tointeger(f.pid)
        self.started:set(true)
        self.start_seen:set(true)
      elseif f.kind == "end" then
        self.outcome = specs.outcome_from_end{ exitCode = f.exit_code, status = f.status }
      elseif f.kind == "stream_error" then
        self.error = self.error or errors.from_connect(METHOD, f.code, f.message, 200)
      end
    end
  end
  if not self.error then
    local ok, err = s:result()
    if not ok and err then self.error = self.sb:explain(self.sb:stream_error(s, err), "terminal") end
  end
  if not self.outcome and not self.error then
    self.error = errors.new("E2B_PROTOCOL", "terminal stream ended without an end event")
  end
  self.exited = true
  self.started:set(false)
  self.start_seen:set(false)
  self.done_ev:set(true)
  -- The top level exited by itself: what it left in its session goes the way a closed
  -- terminal's does (HUP, TERM, KILL), and the service stops tracking it.
  if self.pid and not self.terminating and not self.terminated then
    sched.spawn(function() self:terminate() end)
  end
end

return M
