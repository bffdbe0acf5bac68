-- moonbox: the coroutine scheduler, error objects, the HTTP transport and host processes.
-- The API contract is lua/README.md. Tasks are coroutines; the one libuv loop (C) wakes them.
-- C callbacks never run task code: they only queue the task, and run() resumes it from plain
-- Lua, so a task's error can never unwind through a libuv or libcurl frame.
local core = require "moonbox.core"

local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield
local co_running, co_status = coroutine.running, coroutine.status
local pack, unpack = table.pack, table.unpack

local M = { core = core }

---------------------------------------------------------------------------- errors
local Error = {}
Error.__index = Error
Error.__tostring = function(e) return tostring(e.code) .. ": " .. tostring(e.message) end

function M.error(code, message, fields)
  if type(code) ~= "string" then error("mb.error: code must be a string", 2) end
  local e = {}
  if fields then for k, v in pairs(fields) do e[k] = v end end
  e.code, e.message = code, message ~= nil and tostring(message) or code
  return setmetatable(e, Error)
end

function M.is_error(x) return getmetatable(x) == Error end

---------------------------------------------------------------------------- tasks
local Task = {}
Task.__index = Task
Task.__tostring = function(t) return "moonbox.task(" .. t.status .. ")" end

local current            -- running task
local driving = false    -- inside mb.run
local in_loop = false    -- inside core.run: callbacks are waking tasks
local rq, rargs, rhead, rtail = {}, {}, 1, 0
-- Every task that has not finished, held strongly: a task blocked on something only C holds
-- (a transfer's callback, a timer) is otherwise reachable from nowhere and would be collected.
local live = {}

-- Distinct wake values for a timer and for cancel.
local TIMEOUT, CANCEL = {}, {}
local WEAK_V = { __mode = "v" }

local function enqueue(t, args)
  rtail = rtail + 1
  rq[rtail], rargs[rtail] = t, args
  -- A callback woke a task: make uv_run return instead of blocking in poll until the next timer.
  if in_loop then core.stop() end
end

-- Wakes t if it is blocked on `key`; values become block()'s results.
local function wake(t, key, ...)
  if t.status ~= "waiting" or t.wait_key ~= key then return false end
  t.status, t.wait_key = "ready", nil
  enqueue(t, pack(...))
  return true
end

local timer_pool = {}
local function take_timer()
  local n = #timer_pool
  if n > 0 then local tm = timer_pool[n]; timer_pool[n] = nil; return tm end
  return core.timer()
end

local function check_timeout(ms, level)
  if ms ~= nil and (type(ms) ~= "number" or ms ~= ms or ms < 0) then
    error("timeout must be nil or a number of milliseconds >= 0", level + 1)
  end
end

local function need_task(what, level)
  local t = current
  if not t then error(what .. ": must be called inside a task (mb.run / mb.spawn)", level + 1) end
  if co_running() ~= t.co then error(what .. ": cannot yield from a nested coroutine", level + 1) end
  return t
end

-- Blocks the running task until wake(t, key, ...), a timeout (→ TIMEOUT) or cancel (→ CANCEL).
local function block(t, timeout_ms, key)
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

local function canceled_err(what) return M.error("MB_CANCELED", (what or "operation") .. " canceled") end
local function timeout_err(what, ms)
  return M.error("MB_TIMEOUT", string.format("%s timed out after %s ms", what, tostring(ms)))
end

-- Blocks t on `key` as one of the waiters in `list` (whoever wakes them takes them off or
-- replaces the list). → nil when woken, or the MB_TIMEOUT / MB_CANCELED error.
local function wait_on(key, list, t, timeout_ms, what)
  list[#list + 1] = t
  local r = block(t, timeout_ms, key)
  for i = #list, 1, -1 do if list[i] == t then table.remove(list, i) end end
  if r == TIMEOUT then return timeout_err(what, timeout_ms) end
  if r == CANCEL then return canceled_err(what) end
end

local function on_error(e)
  if M.is_error(e) then
    if e.traceback == nil then e.traceback = debug.traceback(tostring(e), 2) end
    return e
  end
  if type(e) ~= "string" then e = tostring(e) end
  return debug.traceback(e, 2)
end

local function finish(t, r)
  -- r = resume results: true, xpcall_ok, values... (the body never raises past xpcall)
  t.status = "dead"
  live[t] = nil
  if r[1] and r[2] then
    t.ok, t.results = true, pack(unpack(r, 3, r.n))
  else
    t.ok = false
    t.raw_err = r[1] and r[3] or r[2]
    local e = t.raw_err
    t.err = M.is_error(e) and e or M.error("MB_TASK_FAILED", tostring(e))
  end
  local joiners = t.joiners
  t.joiners = nil
  if joiners then for _, j in ipairs(joiners) do wake(j, t, true) end end
end

local function resume(t, args)
  t.status = "running"
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

function M.spawn(fn, ...)
  if type(fn) ~= "function" then error("mb.spawn: fn must be a function", 2) end
  local t = setmetatable({ status = "ready" }, Task)
  t.co = co_create(function(...) return xpcall(fn, on_error, ...) end)
  live[t] = true
  enqueue(t, pack(...))
  return t
end

function M.current() return current end
function M.now() return core.now() end

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
    local res, alive = core.run("once")
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

function Task:join(timeout_ms)
  check_timeout(timeout_ms, 2)
  if self.status ~= "dead" then
    local me = need_task("task:join", 2)
    if me == self then error("task:join: a task cannot join itself", 2) end
    self.joiners = self.joiners or {}
    local err = wait_on(self, self.joiners, me, timeout_ms, "join")
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
  if self.status == "waiting" then
    self.status, self.wait_key = "ready", nil
    enqueue(self, pack(CANCEL))
  else
    self.cancel_pending = true
  end
  return true
end

function Task:done() return self.status == "dead" end

-- true (once) when cancel() reached this task while it was not blocked: the cancellation is
-- consumed, so its next yielding call proceeds (a later t:cancel() gives it back).
function Task:take_cancel()
  if not self.cancel_pending then return false end
  self.cancel_pending = false
  return true
end

function M.sleep(ms)
  if type(ms) ~= "number" or ms ~= ms or ms < 0 then error("mb.sleep: ms must be a number >= 0", 2) end
  local t = need_task("mb.sleep", 2)
  local r = block(t, ms, TIMEOUT)
  if r == CANCEL then return nil, canceled_err("sleep") end
  return true
end

---------------------------------------------------------------------------- event
local Event = {}
Event.__index = Event

function M.event() return setmetatable({ is_set = false, waiters = {} }, Event) end

function Event:set(...)
  if self.is_set then return false end
  self.is_set, self.vals = true, pack(...)
  local ws = self.waiters
  self.waiters = {}
  for _, w in ipairs(ws) do wake(w, self, true) end
  return true
end

function Event:wait(timeout_ms)
  check_timeout(timeout_ms, 2)
  if not self.is_set then
    local err = wait_on(self, self.waiters, need_task("event:wait", 2), timeout_ms, "event wait")
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
    if wake(w, key, true) then return end
  end
end

function Queue:count() return self.tail - self.head + 1 end

function Queue:push(v, timeout_ms)
  if v == nil then error("queue:push: value must not be nil", 2) end
  check_timeout(timeout_ms, 2)
  while true do
    if self.closed then return nil, M.error("MB_CLOSED", "queue is closed") end
    if self:count() < self.max then break end
    local err = wait_on(self, self.pushers, need_task("queue:push", 2), timeout_ms, "queue push")
    if err then return nil, err end
  end
  self.tail = self.tail + 1
  self.items[self.tail] = v
  wake_one(self.poppers, self)
  return true
end

function Queue:pop(timeout_ms)
  check_timeout(timeout_ms, 2)
  while self:count() == 0 do
    if self.closed then return nil, M.error("MB_CLOSED", "queue is closed") end
    local err = wait_on(self, self.poppers, need_task("queue:pop", 2), timeout_ms, "queue pop")
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
  local ws = {}
  for _, w in ipairs(self.poppers) do ws[#ws + 1] = w end
  for _, w in ipairs(self.pushers) do ws[#ws + 1] = w end
  self.poppers, self.pushers = {}, {}
  for _, w in ipairs(ws) do wake(w, self, true) end
end

---------------------------------------------------------------------------- http
local http = {}
M.http = http

local function http_err(msg, code) return M.error(code or "E2B_IO", msg) end

-- One wake-up closure per task for unary requests: a request is always closed before
-- http.request returns, so no notification of an older request can reach a later wait.
local function http_waker(t)
  local cb = t.http_cb
  if not cb then
    local key = {}
    cb = function() wake(t, key, true) end
    t.http_cb, t.http_key = cb, key
  end
  return cb, t.http_key
end

-- Unary request: {status=, headers=, body=} | nil, err. See README for the options.
function http.request(opts)
  if type(opts) ~= "table" then error("http.request: opts must be a table", 2) end
  local t = need_task("http.request", 2)
  local cb, key = http_waker(t)
  local req, msg, code = core.http_request(opts, cb, false)
  if not req then return nil, http_err(msg, code) end
  while not req:done() do
    if block(t, nil, key) == CANCEL then
      req:close()
      return nil, canceled_err("http request")
    end
  end
  local status, headers, body = req:result()
  req:close()
  if not status then return nil, http_err(headers, body) end
  return { status = status, headers = headers, body = body }
end

local Stream = {}
Stream.__index = Stream

-- Streaming request: returns once the response headers are in (timeout_ms bounds that wait).
function http.stream(opts)
  if type(opts) ~= "table" then error("http.stream: opts must be a table", 2) end
  local t = need_task("http.stream", 2)
  local s = setmetatable({ closed = false }, Stream)
  -- The C side keeps the callback alive; reaching s only weakly lets a stream that was
  -- dropped without close() be collected (its request's __gc then cancels the transfer).
  local weak = setmetatable({ s }, WEAK_V)
  local req, msg, code = core.http_request(opts, function()
    local st = weak[1]
    local w = st and st.waiter
    if w then wake(w, st, true) end
  end, true)
  if not req then return nil, http_err(msg, code) end
  s.req = req
  while req:status() == nil and not req:done() do
    s.waiter = t
    local r = block(t, nil, s)
    s.waiter = nil
    if r == CANCEL then s:close(); return nil, canceled_err("http stream") end
  end
  if req:status() == nil then
    local emsg, ecode = req:error()
    s:close()
    return nil, http_err(emsg or "no response", ecode)
  end
  s.status, s.headers = req:status(), req:headers()
  return s
end

-- → chunk | nil (end of body) | nil, err (transport error, MB_TIMEOUT, MB_CANCELED)
function Stream:read(timeout_ms)
  check_timeout(timeout_ms, 2)
  if self.closed then return nil, M.error("E2B_CANCELED", "stream is closed") end
  local t = need_task("stream:read", 2)
  if self.waiter then error("stream:read: another task is already reading this stream", 2) end
  while true do
    local req = self.req
    local chunk = req:read()
    if chunk then return chunk end
    if req:done() then
      local emsg, ecode = req:error()
      if emsg then return nil, http_err(emsg, ecode) end
      return nil
    end
    self.waiter = t
    local r = block(t, timeout_ms, self)
    self.waiter = nil
    if r == TIMEOUT then return nil, timeout_err("stream read", timeout_ms) end
    if r == CANCEL then return nil, canceled_err("stream read") end
    if self.closed then return nil, M.error("E2B_CANCELED", "stream is closed") end
  end
end

-- Transfer counters of this stream: received, buffered, max_buffered, pauses, paused.
function Stream:info()
  if self.closed then return nil end
  return self.req:info()
end

function Stream:close()
  if self.closed then return end
  self.closed = true
  self.req:close()
  local w = self.waiter
  if w then wake(w, self, true) end
end

function http.stats() return core.http_stats() end

---------------------------------------------------------------------------- host processes
local proc = {}
M.proc = proc
local Process = {}
Process.__index = Process

-- proc.spawn{argv={...}, env={NAME=value} (nil: inherit), cwd=, max_buffer=} → process | nil, err
function proc.spawn(opts)
  if type(opts) ~= "table" then error("proc.spawn: opts must be a table", 2) end
  local p = setmetatable({ waiters = {} }, Process)
  local weak = setmetatable({ p }, WEAK_V) -- see http.stream: a dropped process can be collected
  local h, msg, code = core.spawn(opts, function()
    local pr = weak[1]
    if not pr then return end
    local ws = pr.waiters
    pr.waiters = {}
    for _, w in ipairs(ws) do wake(w, pr, true) end
  end)
  if not h then return nil, M.error(code or "E2B_IO", msg) end
  p.h, p.pid = h, h:pid()
  return p
end

-- p:read("stdout"|"stderr", timeout_ms) → data | nil (end) | nil, err
local function closed_err() return M.error("MB_CLOSED", "process object is closed") end

function Process:read(which, timeout_ms)
  check_timeout(timeout_ms, 2)
  if which ~= nil and which ~= "stdout" and which ~= "stderr" then
    error("process:read: which must be \"stdout\" or \"stderr\"", 2)
  end
  while true do
    if self.closed then return nil, closed_err() end
    local data, eof = self.h:read(which or "stdout")
    if data then return data end
    if eof then return nil end
    local err = wait_on(self, self.waiters, need_task("process:read", 2), timeout_ms, "process read")
    if err then return nil, err end
  end
end

-- p:wait(timeout_ms) → exit_code, signal | nil, err
function Process:wait(timeout_ms)
  check_timeout(timeout_ms, 2)
  while true do
    if self.closed then return nil, closed_err() end
    local code, sig = self.h:exit_status()
    if code then return code, sig end
    local err = wait_on(self, self.waiters, need_task("process:wait", 2), timeout_ms, "process wait")
    if err then return nil, err end
  end
end

function Process:kill(sig)
  if self.closed then return nil, M.error("E2B_IO", "process is closed") end
  local ok, msg, code = self.h:kill(sig)
  if not ok then return nil, M.error(code or "E2B_IO", msg) end
  return true
end

-- Releases the handles (a running child keeps running); blocked readers and waiters get
-- nil, MB_CLOSED.
function Process:close()
  if self.closed then return end
  self.closed = true
  self.h:close()
  local ws = self.waiters
  self.waiters = {}
  for _, w in ipairs(ws) do wake(w, self, true) end
end

return M
