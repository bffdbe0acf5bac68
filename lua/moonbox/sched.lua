-- moonbox.sched — tasks: coroutines driven by the one libuv loop (C).
--
-- C callbacks never run task code: they only wake a task (queue it), and run() resumes it from
-- plain Lua, so a task's error can never unwind through a libuv or libcurl frame. Every
-- unfinished task is held here strongly: a task blocked on something only C holds (a
-- transfer's callback, a timer) would otherwise be collected with its coroutine and never
-- finish. Every yielding call takes a timeout (nil: none).
local core = require "moonbox.core"
local errors = require "moonbox.errors"

local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield
local co_running, co_status = coroutine.running, coroutine.status
local pack, unpack = table.pack, table.unpack

local M = {}

local Task = {}
Task.__index = Task
Task.__tostring = function(t) return "moonbox.task(" .. t.status .. ")" end

local current            -- running task
local driving = false    -- inside run
local in_loop = false    -- inside core.run: callbacks are waking tasks
local rq, rargs, rhead, rtail = {}, {}, 1, 0
local live = {}          -- task → true until it finished
local stats = { spawned = 0, resumes = 0, live = 0 }

-- Distinct wake values for a timer and for cancel.
local TIMEOUT, CANCEL = {}, {}
M.TIMEOUT, M.CANCEL = TIMEOUT, CANCEL

local function enqueue(t, args)
  rtail = rtail + 1
  rq[rtail], rargs[rtail] = t, args
  -- A callback woke a task: make uv_run return instead of blocking in poll until the next timer.
  if in_loop then core.stop()
  -- Nobody drives the scheduler (an embedder runs the loop itself): tell its host.
  elseif not driving and M.on_ready then M.on_ready() end
end

-- Wakes t if it is blocked on `key`; the values become block()'s results. → woken?
local function wake(t, key, ...)
  if t.status ~= "waiting" or t.wait_key ~= key then return false end
  t.status, t.wait_key = "ready", nil
  enqueue(t, pack(...))
  return true
end
M.wake = wake

local timer_pool = {}
local function take_timer()
  local n = #timer_pool
  if n > 0 then local tm = timer_pool[n]; timer_pool[n] = nil; return tm end
  return core.timer()
end

function M.check_timeout(ms, level)
  if ms ~= nil and (type(ms) ~= "number" or ms ~= ms or ms < 0) then
    error("timeout must be nil or a number of milliseconds >= 0", level + 1)
  end
end

-- The running task, or a raise naming `what` (outside tasks, or from a nested coroutine).
function M.need_task(what, level)
  local t = current
  if not t then error(what .. ": must be called inside a task (mb.run / mb.spawn)", level + 1) end
  if co_running() ~= t.co then error(what .. ": cannot yield from a nested coroutine", level + 1) end
  return t
end

-- Blocks the running task until wake(t, key, ...), a timeout (→ TIMEOUT) or cancel (→ CANCEL).
function M.block(t, timeout_ms, key)
  if t.cancel_pending then t.cancel_pending = false; return CANCEL end
  t.status, t.wait_key = "waiting", key
  local tm
  if timeout_ms then
    tm = take_timer()
    tm:start(timeout_ms, function() wake(t, key, TIMEOUT) end)
  end
  local r = pack(co_yield(t))
  if tm then tm:stop(); timer_pool[#timer_pool + 1] = tm end
  return unpack(r, 1, r.n)
end
local block = M.block

function M.canceled_err(what) return errors.new("MB_CANCELED", (what or "operation") .. " canceled") end
function M.timeout_err(what, ms)
  return errors.new("MB_TIMEOUT", string.format("%s timed out after %s ms", what, tostring(ms)))
end

-- Blocks t on `key` as one of the waiters in `list` (whoever wakes them takes them off or
-- replaces the list). → nil when woken, or the MB_TIMEOUT / MB_CANCELED error.
function M.wait_on(key, list, t, timeout_ms, what)
  list[#list + 1] = t
  local r = block(t, timeout_ms, key)
  for i = #list, 1, -1 do if list[i] == t then table.remove(list, i) end end
  if r == TIMEOUT then return M.timeout_err(what, timeout_ms) end
  if r == CANCEL then return M.canceled_err(what) end
end

-- Wakes every task of `list` blocked on `key` and empties the list.
function M.wake_all(list, key, ...)
  local n = #list
  if n == 0 then return end
  local ws = {}
  for i = 1, n do ws[i] = list[i]; list[i] = nil end
  for i = 1, n do wake(ws[i], key, ...) end
end

local function on_error(e)
  if errors.is(e) then
    if e.traceback == nil then e.traceback = debug.traceback(tostring(e), 2) end
    return e
  end
  if type(e) ~= "string" then e = tostring(e) end
  return debug.traceback(e, 2)
end

-- The work a task leaves behind when it is abandoned (see M.on_abandon): each fn runs as a
-- task of its own, since finish() runs inside the scheduler.
local function abandon(t)
  local fns = t.abandon_fns
  t.abandon_fns = nil
  if not fns then return end
  local failed = not t.ok or (t.results[1] == nil and errors.is(t.results[2]))
  if not (failed or t.canceled) then return end
  for _, fn in pairs(fns) do M.spawn(fn) end
end

local function finish(t, r)
  -- r = resume results: true, xpcall_ok, values... (the body never raises past xpcall)
  t.status = "dead"
  live[t] = nil
  stats.live = stats.live - 1
  if r[1] and r[2] then
    t.ok, t.results = true, pack(unpack(r, 3, r.n))
  else
    t.ok = false
    t.raw_err = r[1] and r[3] or r[2]
    local e = t.raw_err
    t.err = errors.is(e) and e or errors.new("MB_TASK_FAILED", tostring(e))
  end
  abandon(t)
  local joiners = t.joiners
  t.joiners = nil
  if joiners then for _, j in ipairs(joiners) do wake(j, t, true) end end
end

local function resume(t, args)
  t.status = "running"
  stats.resumes = stats.resumes + 1
  local prev = current
  current = t
  local r = pack(co_resume(t.co, unpack(args, 1, args.n)))
  current = prev
  if co_status(t.co) == "dead" then
    finish(t, r)
  elseif r[2] ~= t then
    -- The body called coroutine.yield itself: treat it as a plain yield to other tasks.
    t.status = "ready"
    enqueue(t, pack())
  end
end

local function run_ready()
  while rhead <= rtail do
    local t, args = rq[rhead], rargs[rhead]
    rq[rhead], rargs[rhead] = nil, nil
    rhead = rhead + 1
    resume(t, args)
  end
  rhead, rtail = 1, 0
end

-- Starts fn(...) as a task. opts (optional): { name = "..." } shown by sched.tasks().
function M.spawn(fn, ...)
  if type(fn) ~= "function" then error("mb.spawn: fn must be a function", 2) end
  local t = setmetatable({ status = "ready" }, Task)
  t.co = co_create(function(...) return xpcall(fn, on_error, ...) end)
  live[t] = true
  stats.spawned, stats.live = stats.spawned + 1, stats.live + 1
  enqueue(t, pack(...))
  return t
end

function M.current() return current end
function M.now() return core.now() end

-- Runs fn as the main task and drives the loop until it returns; → its results, or raises its
-- error (with a traceback).
function M.run(fn, ...)
  if type(fn) ~= "function" then error("mb.run: fn must be a function", 2) end
  if current or driving then error("mb.run: already running (use mb.spawn inside tasks)", 2) end
  local t = M.spawn(fn, ...)
  driving = true
  while true do
    local ok, perr = pcall(run_ready)
    if not ok then driving = false; error(perr, 0) end
    if t.status == "dead" then break end
    in_loop = true
    -- the loop runs in C until a callback wakes a task (enqueue stops it) or nothing is left
    local res, alive = core.run("default")
    in_loop = false
    if not res then driving = false; error("moonbox: loop callback failed: " .. tostring(alive), 0) end
    if not alive and rhead > rtail and t.status ~= "dead" then
      driving = false
      error("mb.run: the main task is blocked and nothing is pending that could wake it", 2)
    end
  end
  driving = false
  if t.ok then return unpack(t.results, 1, t.results.n) end
  error(t.raw_err, 0)
end

-- Embedding (moonbox.runtime): the host runs the loop, or steps it.
-- on_ready(): set by a host that runs the loop itself; called when a task becomes ready while
-- nothing drives the scheduler. The host then calls run_pending() outside every task.
M.on_ready = nil
function M.run_pending()
  if current or driving then return end   -- mb.run or a step is running them already
  driving = true
  local ok, err = pcall(run_ready)
  driving = false
  if not ok then error(err, 0) end
end

-- Ready tasks, one turn of the loop (blocking until something happens when `block`), ready
-- tasks again. → alive (the loop has something that may wake a task), ready (tasks are queued)
function M.step(block)
  if current or driving then error("sched.step: called from inside a task or mb.run", 2) end
  driving = true
  local ok, alive = pcall(function()
    run_ready()
    in_loop = true
    local res, a = core.run(block and rhead > rtail and "once" or "nowait")
    in_loop = false
    if not res then error("moonbox: loop callback failed: " .. tostring(a), 0) end
    run_ready()
    return a
  end)
  in_loop, driving = false, false
  if not ok then error(alive, 0) end
  return alive, rhead <= rtail
end

function Task:join(timeout_ms)
  M.check_timeout(timeout_ms, 2)
  if self.status ~= "dead" then
    local me = M.need_task("task:join", 2)
    if me == self then error("task:join: a task cannot join itself", 2) end
    self.joiners = self.joiners or {}
    local err = M.wait_on(self, self.joiners, me, timeout_ms, "join")
    if err then
      -- Where the joined task is stuck is what a caller needs to debug a timeout.
      if err.code == "MB_TIMEOUT" and self.status == "waiting" then
        err.message = err.message .. "; the task is blocked at: " .. debug.traceback(self.co, nil, 0)
      end
      return nil, err
    end
  end
  if self.ok then return true, unpack(self.results, 1, self.results.n) end
  return nil, self.err
end

function Task:cancel()
  if self.status == "dead" then return false end
  self.canceled = true
  if self.status == "waiting" then
    self.status, self.wait_key = "ready", nil
    enqueue(self, pack(CANCEL))
  else
    self.cancel_pending = true
  end
  return true
end

function Task:done() return self.status == "dead" end

-- fn runs (as a task of its own) if t ends abandoned: canceled at any point, raised, or
-- returned nil plus an error object. What a task starts in the world (commands, terminals)
-- registers its stop here under the thing itself (`key`), so cancelling a task stops its work;
-- forget(t, key) once that thing ended on its own. Keys are held weakly (a long-lived task that
-- starts thousands of commands keeps none of them alive). Nothing for a task that ended well,
-- nor outside tasks (t nil).
function M.on_abandon(t, key, fn)
  if not t or t.status == "dead" then return end
  local fns = t.abandon_fns
  if not fns then fns = setmetatable({}, { __mode = "k" }); t.abandon_fns = fns end
  fns[key] = fn
end

function M.forget(t, key)
  local fns = t and t.abandon_fns
  if fns then fns[key] = nil end
end

-- true (once) when cancel() reached this task while it was not blocked: the cancellation is
-- consumed, so its next yielding call proceeds (a later t:cancel() gives it back).
function Task:take_cancel()
  if not self.cancel_pending then return false end
  self.cancel_pending = false
  return true
end

-- Where the task is: its traceback while it is blocked or ready, nil once it finished.
function Task:where()
  if self.status == "dead" or self.status == "running" then return nil end
  return debug.traceback(self.co, nil, 0)
end

function M.sleep(ms)
  if type(ms) ~= "number" or ms ~= ms or ms < 0 then error("mb.sleep: ms must be a number >= 0", 2) end
  local t = M.need_task("mb.sleep", 2)
  local r = block(t, ms, TIMEOUT)
  if r == CANCEL then return nil, M.canceled_err("sleep") end
  return true
end

-- Every unfinished task (for watchdogs and debugging): a list of tasks.
function M.tasks()
  local out = {}
  for t in pairs(live) do out[#out + 1] = t end
  return out
end

-- Counters: spawned (tasks ever started), resumes (coroutine resumes), live (unfinished tasks).
function M.stats() return { spawned = stats.spawned, resumes = stats.resumes, live = stats.live } end

M.Task = Task
return M
