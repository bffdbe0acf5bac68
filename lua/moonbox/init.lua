-- moonbox: the runtime a script sees — tasks, events and queues, errors, the HTTP transport,
-- host processes. One module per concept behind this table (lua/README.md has the source map
-- and the API contract).
local core = require "moonbox.core"
local errors = require "moonbox.errors"
local sched = require "moonbox.sched"
local sync = require "moonbox.sync"

local M = { core = core }

M.run, M.spawn, M.sleep = sched.run, sched.spawn, sched.sleep
M.current, M.now = sched.current, sched.now
M.tasks, M.stats = sched.tasks, sched.stats
M.event, M.queue = sync.event, sync.queue
M.error, M.is_error = errors.new, errors.is

-- Loaded on first use: a script that never touches them does not pay for them.
local lazy = { http = "moonbox.http", proc = "moonbox.proc", procstream = "moonbox.procstream" }
return setmetatable(M, { __index = function(t, k)
  local name = lazy[k]
  if not name then return nil end
  local v = require(name)
  rawset(t, k, v)
  return v
end })
