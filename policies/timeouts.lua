-- policies/timeouts.lua — every default duration in one place (milliseconds unless named _s).
-- Three clocks are never mixed: the sandbox lease (policies/lifecycle.lua), a command's own
-- deadline (owned by the caller: moonbox arms none for processes), and the observer deadlines
-- below, which bound how long moonbox waits for a reply but never kill or untrack a process.
local M = {}

M.MAX_TIMER_DELAY_MS = 2147483647

M.request_ms = 60000            -- control plane and envd unary calls, /files transfers
M.create_ms = 120000            -- POST /sandboxes (templates can take a while to boot)
M.stream_open_ms = 30000        -- until a server stream's response headers arrive
M.keepalive_interval_s = 50     -- Keepalive-Ping-Interval sent on every envd stream
-- A stream silent for this long (no data, no keepalive) is treated as a dead connection.
M.stream_idle_ms = 3 * M.keepalive_interval_s * 1000
M.sandboxd_start_ms = 10000     -- local sandboxd: until it reports listening
M.sandboxd_stop_grace_ms = 3000 -- local sandboxd: TERM → KILL
M.terminal_grace_ms = 3000      -- default TERM → KILL grace for terminals when none is given
M.tool_ms = 30000               -- mbwrap tool calls (realpath, stat, publish, which, fg, …)
M.signal_grace_ms = 2000        -- `moonbox run` after SIGTERM/SIGINT/SIGHUP: the script's time to
                                -- wind down before the composition is disposed anyway

-- The grace a caller passes must be positive, finite and representable as a timer.
function M.check_grace(ms, what)
  if type(ms) ~= "number" or ms ~= ms or ms <= 0 or ms == math.huge or ms > M.MAX_TIMER_DELAY_MS then
    error(("%s must be a positive finite number no greater than %d"):format(what or "graceMs",
      M.MAX_TIMER_DELAY_MS), 3)
  end
  return ms
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

return M
