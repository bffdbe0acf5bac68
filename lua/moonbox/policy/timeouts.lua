-- moonbox.policy.timeouts — the timeouts policy: its fields, and the checks callers use.
local S = require "moonbox.policy.schema"

local M = { name = "timeouts" }

M.MAX_TIMER_DELAY_MS = 2147483647

local function ms(doc)
  return S.number{ expected = "a positive number of milliseconds (at most 2147483647)", above = 0,
    max = M.MAX_TIMER_DELAY_MS, unit = "ms", doc = doc }
end

M.fields = { "request_ms", "create_ms", "stream_open_ms", "keepalive_interval_s", "stream_idle_ms",
  "sandboxd_start_ms", "sandboxd_stop_grace_ms", "terminal_grace_ms", "tool_ms", "signal_grace_ms" }
M.schema = {
  request_ms = ms("control plane and envd unary calls, /files transfers"),
  create_ms = ms("creating a sandbox"),
  stream_open_ms = ms("until a stream's response headers arrive"),
  keepalive_interval_s = S.number{ expected = "a whole number of seconds from 1 to 2147483", min = 1,
    max = 2147483, integer = true, unit = "s", doc = "Keepalive-Ping-Interval on envd streams" },
  stream_idle_ms = ms("a silent stream is a dead connection"),
  sandboxd_start_ms = ms("local sandboxd: until it listens"),
  sandboxd_stop_grace_ms = ms("local sandboxd: TERM → KILL"),
  terminal_grace_ms = ms("terminals: TERM → KILL when no graceMs is given"),
  tool_ms = ms("mbwrap tool calls"),
  signal_grace_ms = ms("moonbox run: the script's time to wind down after a signal"),
}

-- Rules between fields: → nil | message, the fields involved (the one a user set is blamed)
function M.check(v)
  if v.stream_idle_ms <= v.keepalive_interval_s * 1000 then
    return ("stream_idle_ms (%s) must be longer than keepalive_interval_s × 1000 (%d ms): a stream is silent between keepalives")
      :format(S.show(v.stream_idle_ms), v.keepalive_interval_s * 1000), { "stream_idle_ms", "keepalive_interval_s" }
  end
end

-- The grace a caller passes must be positive, finite and representable as a timer. `level`
-- counts as error()'s does from the function that calls check_grace (default 2: its caller).
function M.check_grace(value, what, level)
  level = (level or 2) + 1
  if value == nil then
    error(("%s is required (milliseconds, a positive number up to %d)"):format(what or "graceMs", M.MAX_TIMER_DELAY_MS), level)
  end
  if type(value) ~= "number" or value ~= value or value <= 0 or value == math.huge or value > M.MAX_TIMER_DELAY_MS then
    error(("%s must be a positive finite number no greater than %d"):format(what or "graceMs",
      M.MAX_TIMER_DELAY_MS), level)
  end
  return value
end

-- min(requested or default, max); a requested value must be positive and finite.
function M.clamp(requested, default, max, what)
  if requested == nil then requested = default end
  if type(requested) ~= "number" or requested ~= requested or requested <= 0 or requested == math.huge then
    error(("%s must be a positive finite number"):format(what or "timeout"), 2)
  end
  if max and requested > max then return max end
  return requested
end

function M.bind(p)
  p.MAX_TIMER_DELAY_MS, p.check_grace, p.clamp = M.MAX_TIMER_DELAY_MS, M.check_grace, M.clamp
  return p
end

return M
