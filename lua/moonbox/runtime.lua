-- moonbox.runtime — one composition for a long-lived host, and the calls it makes into it:
-- the Lua half of the C embedding API (core/runtime.c, include/moonbox.h). One per Lua state.
--
-- open(file, policies) checks the composition and its policies at once and starts its plugins
-- in a task; call(fn, ...) runs fn(ctx, ...) as a task once they have started; close() disposes
-- them. Each call has an id; the host learns that calls ended from take_finished() (so its
-- callbacks run outside every Lua frame) and reads their outcome with result(id).
local errors = require "moonbox.errors"
local sched = require "moonbox.sched"
local events = require "moonbox.events"
local compose = require "moonbox.compose"
local policies = require "moonbox.policies"

local M = {}

local open                    -- { comp, ready = event, ctx, loaded, err }
local calls, finished, next_id = {}, {}, 0

local function handler(e)
  if errors.is(e) then return e end
  return debug.traceback(tostring(e), 2)
end

-- status: "ok" | "failed" (a moonbox error) | "lua" (raised: message is the traceback)
local function settle(rec, r)
  if not r[1] then
    local e = r[2]
    if errors.is(e) then rec.status, rec.code, rec.message = "failed", e.code, tostring(e.message)
    else rec.status, rec.code, rec.message = "lua", "MB_LUA", tostring(e) end
  elseif r[2] == nil and r.n >= 3 and r[3] ~= nil then
    local e = r[3]
    rec.status = "failed"
    rec.code = errors.is(e) and e.code or "MB_FAILED"
    rec.message = errors.is(e) and tostring(e.message) or tostring(e)
  else
    rec.status, rec.results = "ok", table.pack(table.unpack(r, 2, r.n))
  end
  finished[#finished + 1] = rec.id
end

local function start(body, ...)
  next_id = next_id + 1
  local rec = { id = next_id }
  calls[rec.id] = rec
  rec.task = sched.spawn(function(...)
    settle(rec, table.pack(xpcall(body, handler, ...)))
  end, ...)
  return rec.id
end

-- "CONCERN=FILE" strings → { concern → path } | nil, err
local function policy_files(list)
  local files = {}
  for _, v in ipairs(list or {}) do
    local c, path = policies.parse_arg(v)
    if not c then return nil, errors.new("POLICY_INVALID", "policy " .. path) end
    files[c] = path
  end
  return files
end

-- → true | nil, err (MB_BUSY, COMPOSE_INVALID, POLICY_INVALID)
function M.open(file, policy_list)
  if open then return nil, errors.new("MB_BUSY", "a composition is already open: " .. open.comp.file) end
  local files, ferr = policy_files(policy_list)
  if not files then return nil, ferr end
  local f, oerr = io.open(file, "rb")
  if not f then return nil, errors.new("COMPOSE_INVALID", ("composition %s: %s"):format(file, (tostring(oerr):gsub("^[^:]*: ", "")))) end
  f:close()
  local comp, err = compose.load(file, { policy_files = files })
  if not comp then return nil, err end
  local o = { comp = comp, ready = events.event() }
  open = o
  sched.spawn(function()
    local ok, ctx, loaded = xpcall(compose.start, handler, comp)
    if not ok then o.err = errors.is(ctx) and ctx or errors.new("COMPOSE_INVALID", "starting the composition raised: " .. tostring(ctx))
    elseif not ctx then o.err = loaded
    else o.ctx, o.loaded = ctx, loaded end
    o.ready:set(true)
  end)
  return true
end

-- fn(ctx, ...) as a task, once the open composition has started. → id
function M.call(fn, ...)
  if type(fn) ~= "function" then error("runtime.call: expected a function, got " .. type(fn), 2) end
  local o = open
  return start(function(...)
    if o then
      local ok, err = o.ready:wait()
      if not ok then return nil, err end
      if o.err then return nil, o.err end
    end
    return fn(o and o.ctx, ...)
  end, ...)
end

-- Disposes the open composition (a task). → id
function M.close()
  local o = open
  open = nil
  local id = start(function()
    if not o then return true end
    local ok, err = o.ready:wait()
    if not ok then return nil, err end
    if not o.ctx then return true end             -- it never started: nothing to dispose
    local live = {}
    local me = sched.current()
    for _, rec in pairs(calls) do
      if not rec.status and rec.task ~= me and not rec.closing then rec.task:cancel(); live[#live + 1] = rec.task end
    end
    local grace = o.comp.policies.timeouts.signal_grace_ms
    local t0 = sched.now()
    for _, t in ipairs(live) do t:join(math.max(0, grace - (sched.now() - t0))) end
    return compose.stop(o.ctx, o.loaded)
  end)
  calls[id].closing = true
  return id
end

function M.is_open() return open ~= nil end

-- → true | nil, err
function M.reload_policies()
  if not open then return nil, errors.new("MB_CLOSED", "no composition is open") end
  return open.comp.policies:reload()
end

-- → status ("running" | "ok" | "failed" | "lua"), code, message
function M.result(id)
  local rec = calls[id]
  if not rec then error("runtime.result: unknown call " .. tostring(id), 2) end
  return rec.status or "running", rec.code, rec.message
end

-- A finished call's results.
function M.results(id)
  local rec = calls[id]
  if not rec or not rec.results then return end
  return table.unpack(rec.results, 1, rec.results.n)
end

function M.cancel(id)
  local rec = calls[id]
  if not rec or rec.status then return false end
  return rec.task:cancel()
end

function M.release(id) calls[id] = nil end

-- The ids of calls that ended since the last time (each given once).
function M.take_finished()
  local out = finished
  finished = {}
  return out
end

-- Runs what is ready (from the host's idle handle, outside the loop's other callbacks).
M.pump = sched.run_pending

-- One turn; block: wait in the loop until something happens. → true | nil, err when the
-- call `id` (optional) is blocked and nothing pending could wake it.
function M.step(block, id)
  local alive, ready = sched.step(block)
  if id and calls[id] and not calls[id].status and not alive and not ready and #finished == 0 then
    return nil, errors.new("MB_FAILED", "the task is blocked and nothing is pending that could wake it")
  end
  return true
end

return M
