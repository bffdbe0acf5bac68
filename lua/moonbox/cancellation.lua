-- moonbox.cancellation — work a task's cancellation must not cut in half (a publish, an unpack,
-- a clean-up): a cancellation asked while the task was not blocked is taken and given back, and
-- a call runs shielded in a task of its own. Used by the fs seam and workspace sync.
local sched = require "moonbox.sched"
local events = require "moonbox.events"

local M = {}

-- True (once) when the running task was asked to cancel while it was not blocked; the
-- cancellation is consumed (rearm(true) gives it back).
function M.requested()
  local t = sched.current()
  return t ~= nil and t:take_cancel()
end

-- Gives a consumed cancellation back to the running task (when `canceled`).
function M.rearm(canceled)
  local t = canceled and sched.current()
  if t then t:cancel() end
end

-- Runs fn in a task of its own, so cancelling the caller cannot interrupt it, and waits for it.
-- → table.pack(pcall(fn)), canceled (the caller was cancelled meanwhile)
function M.shielded(fn)
  local done = events.event()
  sched.spawn(function() done:set(table.pack(pcall(fn))) end)
  local canceled = false
  while true do
    local r, err = done:wait()
    if type(r) == "table" then return r, canceled end
    if err and err.code == "MB_CANCELED" then canceled = true end
  end
end

return M
