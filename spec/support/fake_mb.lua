-- A deterministic stand-in for `require "moonbox"` (scheduler, events, queues, errors) on a
-- virtual clock, for unit specs of the Lua providers when the C core is not needed.
-- Install with fake_mb.install(); it replaces package.loaded.moonbox until uninstall().
local errors = require "moonbox.errors"

local M = {}

local function new()
  local mb = { clock = 0 }
  local ready, timers, current = {}, {}, nil
  local seq = 0

  local Task = {}
  Task.__index = Task

  local function schedule(task, ...)
    ready[#ready + 1] = { task = task, args = table.pack(...) }
  end

  -- Park the current task until wake() or the timeout; returns what wake() passes.
  local function park(timeout_ms, on_timeout)
    local task = assert(current, "fake mb: yielding call outside a task")
    local w = { task = task, live = true }
    task.parked = w
    if timeout_ms then
      seq = seq + 1
      timers[#timers + 1] = { at = mb.clock + timeout_ms, w = w, seq = seq, on_timeout = on_timeout }
    end
    return w, coroutine.yield()
  end
  local function wake(w, ...)
    if not w.live then return false end
    w.live = false
    w.task.parked = nil
    schedule(w.task, ...)
    return true
  end

  local err_mt = { __tostring = function(e) return tostring(e.code) .. ": " .. tostring(e.message) end }
  function mb.error(code, message, fields)
    local e = { code = code, message = message or code }
    for k, v in pairs(fields or {}) do if e[k] == nil then e[k] = v end end
    return setmetatable(e, err_mt)
  end
  function mb.is_error(x) return errors.is(x) end
  function mb.now() return mb.clock end
  function mb.current() return current end

  function mb.spawn(fn, ...)
    local task = setmetatable({ co = coroutine.create(fn), finished = false, results = nil, joiners = {} }, Task)
    schedule(task, ...)
    return task
  end
  function Task:cancel()
    if self.parked then wake(self.parked, nil, mb.error("MB_CANCELED", "task canceled")) else self.cancel_pending = true end
  end
  function Task:take_cancel()
    if not self.cancel_pending then return false end
    self.cancel_pending = false
    return true
  end
  function mb.sleep(ms)
    local _, a, b = park(ms, function() return true end)
    return a, b
  end

  function mb.event()
    local ev = { is_set = false, waiters = {} }
    function ev:set(...)
      if self.is_set then return end
      self.is_set, self.vals = true, table.pack(...)
      for _, w in ipairs(self.waiters) do wake(w, table.unpack(self.vals, 1, self.vals.n)) end
      self.waiters = {}
    end
    function ev:wait(timeout_ms)
      if self.is_set then return table.unpack(self.vals, 1, self.vals.n) end
      local task = current
      local w = { task = task, live = true }
      task.parked = w
      self.waiters[#self.waiters + 1] = w
      seq = seq + 1
      timers[#timers + 1] = { at = mb.clock + (timeout_ms or 2147483647), w = w, seq = seq,
        on_timeout = function() return nil, mb.error("MB_TIMEOUT", "event wait timed out") end }
      return coroutine.yield()
    end
    return ev
  end

  function mb.queue(max)
    local q = { items = {}, max = max or math.huge, poppers = {}, pushers = {}, closed = false }
    local function wait_on(list, timeout_ms, what)
      local w = { task = current, live = true }
      current.parked = w
      list[#list + 1] = w
      seq = seq + 1
      timers[#timers + 1] = { at = mb.clock + (timeout_ms or 2147483647), w = w, seq = seq,
        on_timeout = function() return nil, mb.error("MB_TIMEOUT", what .. " timed out") end }
      return coroutine.yield()
    end
    function q:push(v, timeout_ms)
      while #self.items >= self.max do
        local ok, err = wait_on(self.pushers, timeout_ms, "push")
        if ok == nil then return nil, err end
      end
      self.items[#self.items + 1] = v
      local w = table.remove(self.poppers, 1)
      while w and not wake(w, true) do w = table.remove(self.poppers, 1) end
      return true
    end
    function q:pop(timeout_ms)
      while #self.items == 0 do
        local ok, err = wait_on(self.poppers, timeout_ms, "pop")
        if ok == nil then return nil, err end
      end
      local v = table.remove(self.items, 1)
      local w = table.remove(self.pushers, 1)
      while w and not wake(w, true) do w = table.remove(self.pushers, 1) end
      return v
    end
    function q:close() self.closed = true end
    return q
  end

  local function step(entry)
    local task = entry.task
    current = task
    local res = table.pack(coroutine.resume(task.co, table.unpack(entry.args, 1, entry.args.n)))
    current = nil
    if coroutine.status(task.co) == "dead" then
      task.finished = true
      if res[1] then task.results = table.pack(true, table.unpack(res, 2, res.n))
      else
        task.results = table.pack(nil, res[2]); task.error = res[2]
        if task ~= mb.main then mb.task_errors = mb.task_errors or {}; table.insert(mb.task_errors, res[2]) end
      end
    end
  end

  -- Drive everything until fn returns (virtual time jumps to the next timer when idle).
  function mb.run(fn, ...)
    local main = mb.spawn(fn, ...)
    mb.main = main
    while not main.finished do
      if #ready > 0 then
        step(table.remove(ready, 1))
      else
        local best, bi
        for i, t in ipairs(timers) do
          if t.w.live and (not best or t.at < best.at or (t.at == best.at and t.seq < best.seq)) then best, bi = t, i end
        end
        if not best then error("fake mb: deadlock (main task blocked, nothing scheduled)") end
        table.remove(timers, bi)
        if best.at > mb.clock then mb.clock = best.at end
        wake(best.w, best.on_timeout())
      end
      for i = #timers, 1, -1 do if not timers[i].w.live then table.remove(timers, i) end end
    end
    if mb.task_errors then error("fake mb: a background task failed: " .. tostring(mb.task_errors[1]), 0) end
    if not main.results[1] then error(main.results[2], 0) end
    return table.unpack(main.results, 2, main.results.n)
  end
  return mb
end

-- The modules below the facade take their scheduler, events and transport from moonbox.sched,
-- moonbox.events, moonbox.http, moonbox.pstream and moonbox.proc (not from the facade), calling
-- through the module tables: install() puts the fake clock's functions into those tables (and
-- the fake facade into package.loaded), and an assignment `mb.http = fake` (pstream, proc)
-- puts fake's functions into the real module's table; uninstall() restores every one.
local PATCHED = { sched = { "spawn", "sleep", "now", "current", "run" }, events = { "event", "queue" } }
local MODULES = { http = "moonbox.http", pstream = "moonbox.pstream", proc = "moonbox.proc" }

local saved = {}           -- { t = module table, k = key, v = original } in patch order
local function patch(t, k, v)
  saved[#saved + 1] = { t = t, k = k, v = rawget(t, k) }
  t[k] = v
end

function M.install()
  M.saved = package.loaded["moonbox"]
  local mb = new()
  for name, keys in pairs(PATCHED) do
    local t = require("moonbox." .. name)
    for _, k in ipairs(keys) do patch(t, k, mb[k]) end
  end
  local overrides = {}
  setmetatable(mb, {
    __index = function(_, k) return overrides[k] end,
    __newindex = function(t, k, v)
      local name = MODULES[k]
      if not name then rawset(t, k, v) return end
      local real = require(name)
      local old = overrides[k]
      if old then for f in pairs(old) do                       -- what an earlier assignment put
        for i = #saved, 1, -1 do
          local e = saved[i]
          if e.t == real and e.k == f then real[f] = e.v table.remove(saved, i) break end
        end
      end end
      overrides[k] = v
      if v ~= nil then for f, fn in pairs(v) do patch(real, f, fn) end end
    end })
  package.loaded["moonbox"] = mb
  return mb
end

function M.uninstall()
  for i = #saved, 1, -1 do saved[i].t[saved[i].k] = saved[i].v end
  saved = {}
  package.loaded["moonbox"] = M.saved
end

return M
