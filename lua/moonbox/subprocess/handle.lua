-- moonbox.subprocess.handle — one spawned process tree in an execution world (an E2B sandbox
-- or this host): the handle that ctx.subprocess:spawn returns.
--
-- The tree runs under `mbwrap run`, whose process stream is decoded in C (moonbox.pstream)
-- into the sinks the spawn chose: a tail ring (collect), a descriptor (inherit), a byte queue
-- (pipe). One task per handle takes the control facts (start, group id, exit or signal, tree
-- empty, completion); it wakes a handful of times per command, whatever the output size.
-- Pipe output is flow-controlled (the transfer pauses while a reader is behind), but the facts
-- never wait behind unread output for long: terminate() drops it, and once the leader exited
-- and graceMs passed without the stream ending, pipes stop taking output.
local errors = require "moonbox.errors"
local sched = require "moonbox.sched"
local specs = require "moonbox.subprocess.spec"
local events = require "moonbox.events"

local M = {}
local Handle = {}
Handle.__index = Handle
M.Handle = Handle

local METHOD = "process.Process/Start"


-- The sandbox itself is gone (deleted or expired): nothing in it can still run.
function M.sandbox_gone(err)
  if not errors.is(err) then return false end
  if err.code == "E2B_SANDBOX_GONE" then return true end
  if err.code == "E2B_UNAVAILABLE" or err.code == "E2B_NOT_FOUND" or err.code == "E2B_HTTP" then
    return (tostring(err.message or "")):lower():find("sandbox was not found", 1, true) ~= nil
  end
  return false
end

-- fields: sp (service), sb (sandbox), spec, s (the process stream), stdin_pipe
function M.new(fields)
  local h = setmetatable(fields, Handle)
  h.pid, h.collected = -1, {}
  h.done_ev, h.pid_ev, h.empty_ev, h.stdin_ready = events.event(), events.event(), events.event(), events.event()
  h.exit_ev = events.event()
  return h
end

function Handle:_settle(outcome, err)
  if self.settled then return end
  self.settled = true
  self.outcome, self.error = outcome, err
  self.done_ev:set(true)
  self.exit_ev:set(true)
end

-- Pipes take no more output: `clear` also drops what they hold (terminate), otherwise readers
-- keep it and then see the end (the drain grace).
function Handle:_drop_pipes(clear)
  for _, kind in ipairs({ "stdout", "stderr" }) do
    if self.spec.stdio[kind] == "pipe" then
      if clear then self.s:discard(kind) else self.s:seal(kind) end
    end
  end
end

-- One control fact → nil, or an error that ends the run.
function Handle:_fact(f)
  local k = f.kind
  if k == "start" then
    self.wrapper_pid = math.tointeger(f.pid)
    if self.stdin_pipe then self.stdin_ready:set(true) end
    if self.terminating then                  -- terminate() came before the start event
      self.terminating = false
      sched.spawn(function() self:terminate() end)
    end
  elseif k == "pgid" then
    self.wrapper_said_anything = true
    self.pid = f.value
    self.pid_ev:set(true)
  elseif k == "spawn_error" then
    self.wrapper_said_anything = true
    self.spawn_error = errors.new("SPAWN_FAILED", ("cannot start %q: %s"):format(self.spec.argv[1], f.message),
      { errno = f.errno })
    self.pid_ev:set(false)                 -- no-op once the group id arrived
  elseif k == "exit" or k == "signal" then
    local fact = k == "exit" and { exitCode = f.value } or { signal = specs.signal_name(f.value) }
    self.exit_fact = fact
    self.exit_ev:set(true)
    -- Drain grace: a descendant holding the pipes cannot hold `done` (canceled when the
    -- stream ends first, as it normally does).
    self.grace_task = sched.spawn(function()
      if not sched.sleep(self.spec.graceMs) then return end
      if not self.stream_ended then self:_drop_pipes(false) end
      self:_settle(fact)
    end)
  elseif k == "empty" then
    self.tree_empty = true
    self.empty_ev:set(true)
  elseif k == "done" then
    self.completed = true
  elseif k == "end" then
    self.end_fact = f
  elseif k == "stream_error" then
    return errors.from_connect(METHOD, f.code, f.message, 200)
  elseif k == "sink_error" then
    self.sink_error = self.sink_error or errors.new("SUBPROCESS_OUTPUT",
      ("%s: cannot write inherited output: %s"):format(f.stream, f.message), { errno = f.errno })
  end
end

function Handle:_fail(err)
  self.transport_error = err
  self.s:cancel()
  if self.stdin_pipe and not self.wrapper_pid then self.stdin_ready:set(false) end
  self.pid_ev:set(false)                 -- no-op once the group id arrived
  self.empty_ev:set(false)          -- waitForExit must not wait for a fact that cannot come
  self.stream_ended = true
  if self.grace_task then self.grace_task:cancel() end
  self:_settle(nil, err)
end

-- The fact task: runs until the stream closed.
function Handle:_run()
  local s = self.s
  while true do
    local facts, err = s:next_facts()
    if not facts then
      if err then return self:_fail(err) end   -- the task itself was canceled
      break
    end
    for _, f in ipairs(facts) do
      local ferr = self:_fact(f)
      if ferr then return self:_fail(ferr) end
    end
  end
  self.stream_ended = true
  if self.grace_task then self.grace_task:cancel() end
  local ok, err = s:result()
  if not self.exit_fact and not self.wrapper_said_anything and self.end_fact and (ok or err.code == "E2B_PROTOCOL") then
    -- The wrapper was killed before it wrote a frame (a terminate that raced its start; envd's
    -- end event says so): the program never ran — its child exits on the wrapper's death.
    local o = specs.outcome_from_end{ exitCode = self.end_fact.exit_code, status = self.end_fact.status }
    if o.signal then
      self.tree_empty = true; self.empty_ev:set(true)
      self.spawn_error = errors.new("SPAWN_FAILED", ("%q did not start: its wrapper ended by %s"):format(
        self.spec.argv[1], o.signal))
      self.pid_ev:set(false)
      return self:_settle(o)
    end
  end
  if not ok then
    return self:_fail(self.sb:explain(self.sb:stream_error(s, err), "while " .. self.spec.argv[1] .. " ran"))
  end
  if self.spawn_error then
    self.tree_empty = true; self.empty_ev:set(true)
    return self:_settle(nil, self.spawn_error)
  end
  if not self.exit_fact then
    return self:_fail(errors.new("E2B_PROTOCOL", "mbwrap ended without an exit fact: " .. s:diag()))
  end
  self:_settle(self.exit_fact)
end

-- → { exitCode = n } or { signal = "SIGKILL" } | nil, err (spawn failure, transport failure, MB_TIMEOUT)
function Handle:wait(timeout_ms)
  local ok, err = self.done_ev:wait(timeout_ms)
  if not ok and not self.settled then return nil, err end
  if self.error then return nil, self.error end
  return self.outcome
end
Handle.done = Handle.wait

-- The outcome as soon as the group leader has exited (everything it wrote before is in the
-- sinks), without waiting for descendants that still hold the output open: a shell's `cmd &`.
-- → { exitCode } | { signal } | nil, err
function Handle:exited(timeout_ms)
  local ok, err = self.exit_ev:wait(timeout_ms)
  if not ok and not self.exit_fact and not self.settled then return nil, err end
  if self.exit_fact then return self.exit_fact end
  if self.error then return nil, self.error end
  return self.outcome
end

-- The service stops tracking this handle (and watching its cancel token).
function Handle:_untrack()
  self.sp.live[self] = nil
  sched.forget(self.owner, self)                  -- its tree ended: nothing left to stop
  if self.cancel_task then self.cancel_task:cancel() end
end

-- The tree is known to be gone without the stream saying so (sandbox gone, session killed).
function Handle:_gone()
  self.tree_empty = true
  self.empty_ev:set(true)
  self:_untrack()
end

-- SIGTERM to the wrapper (one SendSignal): it TERMs the whole tree and KILLs it after graceMs.
function Handle:_term_wrapper()
  return self.sb:signal_process(self.s, self.wrapper_pid, "SIGTERM")
end

-- The stream carrying the facts broke while the tree may still run: TERM the wrapper (it
-- TERMs/KILLs the whole tree, double-forked descendants included) and kill the program's
-- session by its id inside the sandbox, which returns once the session is empty.
function Handle:_kill_detached()
  if self.tree_empty then return true end
  if M.sandbox_gone(self.transport_error) then self:_gone() return true end
  if self.wrapper_pid then
    local _, err = self:_term_wrapper()
    if err and M.sandbox_gone(self.sb:explain(err)) then self:_gone() return true end
  end
  if (self.pid or -1) <= 1 then                   -- the program never got a group id
    self:_gone()
    return true
  end
  local _, err = self.sp:_killsession(self.sb, self.pid, self.spec.graceMs)
  if err and not M.sandbox_gone(err) then return nil, err end
  self:_gone()
  return true
end

-- TERM to the whole tree, KILL after graceMs (the wrapper does both). Idempotent. Unread pipe
-- output is dropped at once: the exit facts must not wait behind it.
function Handle:terminate()
  if self.tree_empty then return true end
  self:_drop_pipes(true)
  if self.transport_error then return self:_kill_detached() end
  if self.terminating then return true end
  self.terminating = true
  for _, kind in ipairs({ "stdout", "stderr" }) do  -- inherited output ends with the request
    if self.spec.stdio[kind] == "inherit" then self.s:discard(kind) end
  end
  if not self.wrapper_pid then return true end     -- sent when the start event arrives
  local _, err = self:_term_wrapper()
  if err and M.sandbox_gone(err) then self:_gone() return true end
  if err and err.code ~= "E2B_NOT_FOUND" then
    self.terminating = false
    if self.transport_error then return self:_kill_detached() end
    return nil, err
  end
  return true
end

-- true once no process of the tree is left; false when timeout_ms elapsed first;
-- nil, err when the stream carrying the facts broke (the tree's state is unknown).
function Handle:waitForExit(timeout_ms)
  if self.tree_empty then return true end
  local ok = self.empty_ev:wait(timeout_ms)
  if ok then return true end
  if self.transport_error then return nil, self.transport_error end
  return false
end

-- The stdin of a 'pipe' spawn: :write(data) → true | nil, err; :close().
function M.stdin_writer(self)
  return {
    write = function(_, data)
      if type(data) ~= "string" then error("stdin:write: data must be a string", 2) end
      if self.stdin_closed then return nil, errors.new("SUBPROCESS_STDIN_CLOSED", "stdin is closed") end
      self.stdin_ready:wait()
      if not self.wrapper_pid then return nil, self.error or errors.new("SPAWN_FAILED", "process did not start") end
      return self.sb:send_input(self.s, self.wrapper_pid, data)
    end,
    close = function()
      if self.stdin_closed then return true end
      self.stdin_closed = true
      self.stdin_ready:wait()
      if not self.wrapper_pid then return true end
      local r, err = self.sb:close_input(self.s, self.wrapper_pid)
      if not r and err.code ~= "E2B_NOT_FOUND" then return nil, err end
      return true
    end,
  }
end

return M
