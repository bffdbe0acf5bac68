-- moonbox.events — what tasks wait on: one-shot events and bounded queues.
local sched = require "moonbox.sched"
local errors = require "moonbox.errors"

local pack, unpack = table.pack, table.unpack
local M = {}

---------------------------------------------------------------------------- event
local Event = {}
Event.__index = Event

function M.event() return setmetatable({ is_set = false, waiters = {} }, Event) end

-- Sets the event once (later calls return false); its values go to every waiter.
function Event:set(...)
  if self.is_set then return false end
  self.is_set, self.vals = true, pack(...)
  sched.wake_all(self.waiters, self, true)
  return true
end

-- → the set values (true when set with none) | nil, err (MB_TIMEOUT, MB_CANCELED)
function Event:wait(timeout_ms)
  sched.check_timeout(timeout_ms, 2)
  if not self.is_set then
    local err = sched.wait_on(self, self.waiters, sched.need_task("event:wait", 2), timeout_ms, "event wait")
    if err then return nil, err end
  end
  if self.vals.n == 0 then return true end
  return unpack(self.vals, 1, self.vals.n)
end

---------------------------------------------------------------------------- queue
local Queue = {}
Queue.__index = Queue

function M.queue(max)
  if max ~= nil and (math.type(max) ~= "integer" or max < 1) then error("mb.queue: max must be an integer >= 1", 2) end
  return setmetatable({ items = {}, head = 1, tail = 0, max = max or math.maxinteger,
                        closed = false, poppers = {}, pushers = {} }, Queue)
end

local function wake_one(list, key)
  while #list > 0 do
    local w = table.remove(list, 1)
    if sched.wake(w, key, true) then return end
  end
end

function Queue:count() return self.tail - self.head + 1 end

function Queue:push(v, timeout_ms)
  if v == nil then error("queue:push: value must not be nil", 2) end
  sched.check_timeout(timeout_ms, 2)
  while true do
    if self.closed then return nil, errors.new("MB_CLOSED", "queue is closed") end
    if self:count() < self.max then break end
    local err = sched.wait_on(self, self.pushers, sched.need_task("queue:push", 2), timeout_ms, "queue push")
    if err then return nil, err end
  end
  self.tail = self.tail + 1
  self.items[self.tail] = v
  wake_one(self.poppers, self)
  return true
end

function Queue:pop(timeout_ms)
  sched.check_timeout(timeout_ms, 2)
  while self:count() == 0 do
    if self.closed then return nil, errors.new("MB_CLOSED", "queue is closed") end
    local err = sched.wait_on(self, self.poppers, sched.need_task("queue:pop", 2), timeout_ms, "queue pop")
    if err then return nil, err end
  end
  local v = self.items[self.head]
  self.items[self.head] = nil
  self.head = self.head + 1
  wake_one(self.pushers, self)
  return v
end

-- Pending items can still be popped; then pop returns nil, MB_CLOSED.
function Queue:close()
  if self.closed then return end
  self.closed = true
  sched.wake_all(self.poppers, self, true)
  sched.wake_all(self.pushers, self, true)
end

return M
