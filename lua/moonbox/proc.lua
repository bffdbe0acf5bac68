-- moonbox.proc — host child processes (uv_spawn): how moonbox starts the local sandboxd.
--   proc.spawn{ argv = {...}, env = {NAME = value} (nil: inherit), cwd =, max_buffer = } → p | nil, err
--   p.pid; p:read("stdout"|"stderr", timeout_ms) → data | nil (end) | nil, err
--   p:wait(timeout_ms) → exit_code, signal | nil, err;  p:kill(signal);  p:close()
local core = require "moonbox.core"
local fields = require "moonbox.fields"
local sched = require "moonbox.sched"
local errors = require "moonbox.errors"

local M = {}
local WEAK_V = { __mode = "v" }
local Process = {}
Process.__index = Process

-- What core.spawn reads; any other field is a mistake.
M.SPAWN_FIELDS = { "argv", "env", "cwd", "max_buffer", "inherit_fds" }

function M.spawn(opts)
  if type(opts) ~= "table" then error("proc.spawn: opts must be a table", 2) end
  fields.only(opts, M.SPAWN_FIELDS, "proc.spawn", 2)
  local p = setmetatable({ waiters = {} }, Process)
  local weak = setmetatable({ p }, WEAK_V) -- a dropped process object can be collected
  local h, err = core.spawn(opts, function()
    local pr = weak[1]
    if pr then sched.wake_all(pr.waiters, pr, true) end
  end)
  if not h then return nil, err end
  p.h, p.pid = h, h:pid()
  return p
end

local function closed_err() return errors.new("MB_CLOSED", "process object is closed") end

function Process:read(which, timeout_ms)
  sched.check_timeout(timeout_ms, 2)
  if which ~= nil and which ~= "stdout" and which ~= "stderr" then
    error("process:read: which must be \"stdout\" or \"stderr\"", 2)
  end
  while true do
    if self.closed then return nil, closed_err() end
    local data = self.h:read(which or "stdout")
    if data then return data end
    if data == nil then return nil end
    local err = sched.wait_on(self, self.waiters, sched.need_task("process:read", 2), timeout_ms, "process read")
    if err then return nil, err end
  end
end

function Process:wait(timeout_ms)
  sched.check_timeout(timeout_ms, 2)
  while true do
    if self.closed then return nil, closed_err() end
    local code, sig = self.h:exit_status()
    if code then return code, sig end
    local err = sched.wait_on(self, self.waiters, sched.need_task("process:wait", 2), timeout_ms, "process wait")
    if err then return nil, err end
  end
end

-- → true | nil, err (MB_EXITED once the process has exited, MB_CLOSED after close)
function Process:kill(sig)
  if self.closed then return nil, closed_err() end
  return self.h:kill(sig)
end

-- Releases the handles (a running child keeps running); blocked readers and waiters get
-- nil, MB_CLOSED.
function Process:close()
  if self.closed then return end
  self.closed = true
  self.h:close()
  sched.wake_all(self.waiters, self, true)
end

return M
