-- policies/timeouts.lua — every default duration in one place (milliseconds unless named _s;
-- the shipped defaults: a policy file of your own sets any subset of these fields).
-- Three clocks are never mixed: the sandbox lease (policies/lifecycle.lua), a command's own
-- deadline (owned by the caller: moonbox arms none for processes), and the observer deadlines
-- below, which bound how long moonbox waits for a reply but never kill or untrack a process.
-- See them all, with where each was set: moonbox policy timeouts [--compose C]
return {
  request_ms = 60000,            -- control plane and envd unary calls, /files transfers
  create_ms = 120000,            -- POST /sandboxes (templates can take a while to boot)
  stream_open_ms = 30000,        -- until a server stream's response headers arrive
  keepalive_interval_s = 50,     -- Keepalive-Ping-Interval sent on every envd stream
  -- A stream silent for this long (no data, no keepalive: 3 missed keepalives) is treated as a
  -- dead connection. Must be longer than the keepalive interval.
  stream_idle_ms = 150000,
  sandboxd_start_ms = 10000,     -- local sandboxd: until it reports listening
  sandboxd_stop_grace_ms = 3000, -- local sandboxd: TERM → KILL
  terminal_grace_ms = 3000,      -- default TERM → KILL grace for terminals when none is given
  tool_ms = 30000,               -- mbwrap tool calls (realpath, stat, publish, which, fg, …)
  signal_grace_ms = 2000,        -- `moonbox run` after SIGTERM/SIGINT/SIGHUP: the script's time
                                 -- to wind down before the composition is disposed anyway
}
