-- moonbox.fs.lock — per-target critical sections on the host: callers run fn one at a time per
-- key, in arrival order. Mutations of the filesystem providers run inside them.
local sched = require "moonbox.sched"
local events = require "moonbox.events"

local M = {}
local Locks = {}
Locks.__index = Locks

function M.new() return setmetatable({ chains = {} }, Locks) end

-- Runs fn() once every earlier caller for `key` finished. → fn's results | nil, err when the
-- wait itself was canceled (fn did not run). fn's raise is re-raised after the lock is passed on.
function Locks:run(key, fn)
  local prev = self.chains[key]
  local mine = events.event()
  self.chains[key] = mine
  if prev then
    local ok, err = prev:wait()
    if not ok then
      -- canceled: keep the chain intact, the next waiter still waits for `prev` through us
      sched.spawn(function() prev:wait() mine:set(true) end)
      return nil, err
    end
  end
  local res = table.pack(pcall(fn))
  if self.chains[key] == mine then self.chains[key] = nil end
  mine:set(true)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- Keys with a caller inside or waiting (for leak checks).
function Locks:count()
  local n = 0
  for _ in pairs(self.chains) do n = n + 1 end
  return n
end

return M
