-- moonbox: the runtime a script sees — tasks, events and queues, errors, the HTTP transport,
-- host processes. One module per concept behind this table (lua/README.md has the source map
-- and the API contract).
local core = require "moonbox.core"
local errors = require "moonbox.errors"
local sched = require "moonbox.sched"
local events = require "moonbox.events"
local http = require "moonbox.http"
local proc = require "moonbox.proc"
local pstream = require "moonbox.pstream"

local M = { core = core }

M.run, M.spawn, M.sleep = sched.run, sched.spawn, sched.sleep
M.current, M.now = sched.current, sched.now
M.tasks, M.stats = sched.tasks, sched.stats
M.event, M.queue = events.event, events.queue
M.error, M.is_error = errors.new, errors.is

M.http, M.proc, M.pstream = http, proc, pstream
return M
