-- moonbox.subprocess.service — the subprocess seam (`ctx.subprocess`) over an execution world
-- (moonbox.world.common): one implementation for the E2B provider (plugin "subprocess",
-- moonbox.subprocess.e2b) and the host provider (plugin "subprocess-local",
-- moonbox.subprocess.local).
--
-- spawn = ONE start of `mbwrap run` (E2B: one process.Process/Start; on the host: one uv_spawn)
-- — no shell, no login profile, no polling: the wrapper reports the process-group id, output
-- frames, exit or signal, "tree empty" and completion in band, and the stream is decoded in C as
-- it arrives (handle.lua). The environment is policies/env.lua applied on the host to the
-- world's ambient environment; its values travel out of band (the request's `envs`, the spawn's
-- environment) and `-K NAME` makes the wrapper keep exactly those names. Batch stdin up to
-- core.limits.stdin_arg_max rides along as `-i BASE64`. terminate() = SIGTERM to the wrapper,
-- which TERMs the whole tree (double-forked descendants included: it is a child subreaper) and
-- KILLs it after graceMs; `done` reports SIGKILL only once the leader is dead.
-- Terminals (terminal.lua): `mbwrap exec` on a new PTY, decoded in C too.
--
-- Cancellation (the seam's `signal`): spec.cancel is an mb.event(); setting it (ev:set())
-- starts terminate() of a spawned process, or abandons a terminal's allocation (a terminal
-- that started meanwhile is killed in the background; a published terminal owns its lifetime).
-- Spills live in <runtime root>/processes-<service id>/; mbwrap removes those the tail holds
-- whole (-k) and those of programs that never ran; dispose removes the directory.
-- A process whose stream broke stays tracked; dispose kills it by its ids inside the world.
local errors = require "moonbox.errors"
local ids = require "moonbox.ids"
local sched = require "moonbox.sched"
local specs = require "moonbox.subprocess.spec"
local handle = require "moonbox.subprocess.handle"
local terminal = require "moonbox.subprocess.terminal"
local collector = require "moonbox.subprocess.collector"
local core = require "moonbox.core"
local policy_set = require "moonbox.policies"

local M = {}

local function limits() return core.limits end

-- The configuration both providers take.
M.schema = {
  frameLineMax = { type = "number", default = function() return limits().frame_line_default end,
    check = function(v)
      local min = limits().frame_line_min
      if v < min or v ~= math.floor(v) then return ("must admit a whole data frame (an integer >= %d)"):format(min) end
    end },
  pipeBufferBytes = { type = "number", default = 256 * 1024,
    check = function(v) if v < 4096 or v ~= math.floor(v) then return "must be an integer >= 4096" end end },
}



M.SIGNALS, M.signal_name = specs.SIGNALS, specs.signal_name
M.sandbox_gone, M.outcome_from_end = handle.sandbox_gone, specs.outcome_from_end

-- Where a service's spills live in a sandbox (mbwrap makes it on first use; dispose removes it).
function M.spill_dir(sb, id) return ("%s/processes-%s"):format(sb.root, id) end

-- A Start refused before the program ran: a missing cwd is a spawn failure, not a bad request.
function M.start_error(err, spec)
  if err and err.code == "E2B_INVALID_ARGUMENT" then
    return errors.new("SPAWN_FAILED", ("cannot start %q in cwd %q: %s"):format(spec.argv[1], tostring(spec.cwd),
      tostring(err.message)), { cause = err, cwd = spec.cwd })
  end
  return err
end

------------------------------------------------------------------------------------------------
local SP = {}
SP.__index = SP

function SP:_sandbox()
  if self.disposing then return nil, errors.new("SUBPROCESS_DISPOSING", "subprocess service is disposing") end
  return self.world()
end

function SP:_env(sb, explicit) return self.policies_env.build(sb.ambient, explicit) end

-- mbwrap killsession: TERM every process of session `pid`, KILL after the grace, return once
-- the session is empty (inside the sandbox, one request).
function SP:_killsession(sb, pid, grace_ms)
  local grace = specs.whole_ms(grace_ms)
  return sb:tool({ "killsession", tostring(pid), tostring(grace) }, { timeout_ms = grace + 10000 + self.timeouts.tool_ms })
end

-- The environment as the request's `envs` plus the `-K NAME` arguments that keep exactly it.
function SP:_envs(env, args)
  local envs = {}
  for _, entry in ipairs(self.policies_env.serialize(env)) do
    local name, value = entry:match("^([^=]*)=(.*)$")
    envs[name] = value
    args[#args + 1] = "-K"; args[#args + 1] = name
  end
  return envs
end

-- → canonical absolute path | nil, err (SUBPROCESS_NOT_FOUND, SUBPROCESS_INVALID_ARGUMENT)
function SP:resolveExecutable(command, env)
  if type(command) ~= "string" or command == "" then
    return nil, errors.new("SUBPROCESS_INVALID_ARGUMENT", "executable name must be non-empty")
  end
  if command:find("/", 1, true) and command:sub(1, 1) ~= "/" then
    return nil, errors.new("SUBPROCESS_INVALID_ARGUMENT",
      command .. " is a relative path; use an absolute path or a bare PATH name")
  end
  local sb, err = self:_sandbox()
  if not sb then return nil, err end
  local e = self:_env(sb, env)
  local out, terr = sb:tool({ "which", command, e.PATH or "" }, { cwd = sb.cwd })
  if not out then
    if terr.tool_code == "ENOENT" then
      return nil, errors.new("SUBPROCESS_NOT_FOUND", terr.message, { cause = terr })
    end
    return nil, terr
  end
  return out
end

-- spec: { argv, cwd, stdio = { stdin, stdout, stderr }, graceMs, env, cancel }
-- Blocks until the wrapper reports the process-group id (so `pid` is real) → handle | nil, err
function SP:spawn(spec)
  if self.disposing then error("subprocess service is disposing", 2) end
  specs.check_spawn(spec, self.timeouts, 2)
  if spec.cancel and spec.cancel.is_set then
    return nil, errors.new("SUBPROCESS_CANCELED", "aborted before spawn")
  end
  local stdio = spec.stdio
  local sb, err = self:_sandbox()
  if not sb then return nil, err end
  local env = self:_env(sb, spec.env)           -- raises on invalid entries (before launch)
  self.seq = self.seq + 1
  local args = { "run", "-g", tostring(specs.whole_ms(spec.graceMs)) }
  local sinks, spills = {}, {}
  for _, kind in ipairs({ "stdout", "stderr" }) do
    local mode = stdio[kind]
    if mode == "pipe" then
      sinks[kind] = "pipe"
    elseif mode == "inherit" then
      sinks[kind] = { fd = kind == "stdout" and 1 or 2 }
    else
      local tail = math.tointeger(mode.maxBytes)
      if mode.spill then
        local smax = math.tointeger(mode.spill.maxBytes)
        local sp = { maxBytes = smax, path = ("%s/spill-%d-%s.%s.log"):format(M.spill_dir(sb, self.id),
          self.seq, ids.hex(4), kind) }
        args[#args + 1] = kind == "stdout" and "-o" or "-e"
        args[#args + 1] = sp.path .. ":" .. smax
        -- mbwrap removes the spill at the end when the tail holds the whole stream
        args[#args + 1] = "-k"; args[#args + 1] = (kind == "stdout" and "o:" or "e:") .. tail
        self.spill_sandboxes[sb] = true
        spills[kind] = sp
      end
      sinks[kind] = { tail = tail }
    end
  end
  local envs = self:_envs(env, args)
  -- Batch stdin up to stdin_arg_max rides on the command line (`-i BASE64`): one request.
  local sin = stdio.stdin
  local stdin_data = type(sin) == "table" and sin.data or nil
  if stdin_data and #stdin_data <= limits().stdin_arg_max then
    args[#args + 1] = "-i"; args[#args + 1] = sb.core.b64encode(stdin_data)
    stdin_data = nil
  end
  local stdin_pipe = sin == "pipe" or stdin_data ~= nil
  args[#args + 1] = "--"
  for _, a in ipairs(spec.argv) do args[#args + 1] = a end

  local s, serr = sb:run_process(args, envs, spec.cwd, stdin_pipe, { stdout = sinks.stdout, stderr = sinks.stderr,
    max_line = self.config.frameLineMax, high_water = self.config.pipeBufferBytes })
  if not s then return nil, M.start_error(serr, spec) end
  local h = handle.new{ sp = self, sb = sb, spec = spec, s = s, stdin_pipe = stdin_pipe }
  for _, kind in ipairs({ "stdout", "stderr" }) do
    if sinks[kind] == "pipe" then
      h[kind] = { read = function(_, timeout_ms) return s:read(kind, timeout_ms) end }
    elseif type(sinks[kind]) == "table" and sinks[kind].tail then
      h.collected[kind] = collector.new(s, kind, spills[kind], h)
    end
  end
  self.live[h] = true
  h.reader = sched.spawn(function()
    h:_run()
    -- auto-release once the tree is gone; a broken stream leaves it tracked (dispose kills it)
    if h.tree_empty then h:_untrack() end
  end)
  h.cancel_task = specs.watch_cancel(spec.cancel, function()
    if not h.tree_empty then h:terminate() end
  end)
  if sin == "pipe" then h.stdin = handle.stdin_writer(h) end
  -- The starting task's work: stopped (TERM, grace, KILL) if that task is canceled or fails.
  if not spec.detached then
    h.owner = sched.current()
    sched.on_abandon(h.owner, h, function() if not h.tree_empty then h:terminate() end end)
  end

  local ok, werr = h.pid_ev:wait(self.timeouts.stream_open_ms + self.timeouts.request_ms)
  if not ok then
    if werr then                                  -- canceled or timed out: do not leave it running
      h:terminate()
      return nil, werr
    end
    -- without a start event there is no wrapper to kill; after it, a broken stream stays tracked
    if not (h.transport_error and h.wrapper_pid) then h:_untrack() end
    return nil, M.start_error(h.spawn_error or h.error or errors.new("SPAWN_FAILED", "process did not start"), spec)
  end
  -- An exec failure usually arrives with the group id; later ones fail `wait` instead.
  if h.spawn_error then
    h:_untrack()
    return nil, h.spawn_error
  end
  if stdin_data then                             -- too large for an argument: SendInput
    local w = handle.stdin_writer(h)
    local wok, wr = w:write(stdin_data)
    if wok then wok, wr = w:close() end
    if not wok and wr.code ~= "E2B_NOT_FOUND" and wr.code ~= "E2B_INTERNAL" then h.stdin_error = wr end
  end
  return h
end

-- spec: { argv, cwd, env, rows, cols, graceMs, cancel } → terminal | nil, err
-- spec.cancel (an mb.event()) cancels the allocation only (SUBPROCESS_CANCELED).
function SP:spawnTerminal(spec)
  if self.disposing then error("subprocess service is disposing", 2) end
  specs.check_terminal(spec, self.timeouts, 2)
  local grace = spec.graceMs or self.timeouts.terminal_grace_ms
  local canceled = errors.new("SUBPROCESS_CANCELED", "terminal allocation canceled")
  if spec.cancel and spec.cancel.is_set then return nil, canceled end
  local rows, cols = spec.rows or 24, spec.cols or 80
  local sb, err = self:_sandbox()
  if not sb then return nil, err end
  local env = self:_env(sb, spec.env)           -- raises on invalid entries (before launch)
  local args = { "exec" }
  local envs = self:_envs(env, args)
  args[#args + 1] = "--"
  for _, a in ipairs(spec.argv) do args[#args + 1] = a end
  local cwd = spec.cwd or sb.cwd
  local s, serr = sb:run_terminal(args, envs, cwd, rows, cols,
    { raw = true, stdout = "pipe", stderr = "discard", high_water = self.config.pipeBufferBytes })
  if not s then return nil, M.start_error(serr, { argv = spec.argv, cwd = cwd }) end
  local t = terminal.new{ sp = self, sb = sb, graceMs = grace, s = s }
  t.reader = sched.spawn(function() t:_run() end)
  local watcher = specs.watch_cancel(spec.cancel, function() t.started:set(false, canceled) end)
  local limit = self.timeouts.stream_open_ms + self.timeouts.request_ms
  local ok, werr = t.started:wait(limit)
  if watcher then watcher:cancel() end
  if not ok then
    if werr ~= nil and not t.exited then
      -- canceled or timed out: a PTY that starts anyway is killed in the background
      sched.spawn(function()
        s:discard("stdout")
        t.start_seen:wait(limit)
        if t.pid and not t.exited then self:_killsession(t.sb, t.pid, grace) end
        s:close()
      end)
    else
      s:close()
    end
    return nil, werr or t.error or errors.new("E2B_PROTOCOL", "terminal did not start")
  end
  self.terminals[t] = true
  t.output = { read = function(_, timeout_ms) return t:read(timeout_ms) end }
  if not spec.detached then
    t.owner = sched.current()
    sched.on_abandon(t.owner, t, function() t:terminate() end)
  end
  return t
end

-- Disposal: terminate every live process and terminal and wait for their trees.
-- A handle whose stream broke stays tracked: it is killed by its ids inside the sandbox.
-- Then the spill directory of each sandbox used is removed (one request each).
function SP:dispose()
  self.disposing = true
  local first
  local hs = {}
  for h in pairs(self.live) do hs[#hs + 1] = h end
  for _, h in ipairs(hs) do
    if not h.tree_empty then
      local ok, err = h:terminate()
      if not ok then first = first or err end
    end
  end
  for _, h in ipairs(hs) do
    if not h.tree_empty then
      local done, err = h:waitForExit(h.spec.graceMs + self.timeouts.request_ms)
      if done == nil and h.transport_error then done, err = h:_kill_detached() end
      if not done then
        first = first or err or errors.new("SUBPROCESS_TEARDOWN", "a process tree survived disposal")
      end
    end
    h:_untrack()
    h.s:cancel()                        -- what it collected stays readable
  end
  for t in pairs(self.terminals) do
    local ok, err = t:terminate()
    if not ok then first = first or err end
    t.s:cancel()
  end
  for sb in pairs(self.spill_sandboxes) do
    local _, err = sb:remove_tree(M.spill_dir(sb, self.id))
    if err and err.code ~= "E2B_NOT_FOUND" and not M.sandbox_gone(sb:explain(err)) then first = first or err end
    self.spill_sandboxes[sb] = nil
  end
  if self.on_dispose then
    local ok, err = self.on_dispose()
    if not ok then first = first or err end
  end
  if first then return nil, first end
  return true
end

-- world(): → the execution world | nil, err (it may wait for it: an E2B owner's setup).
function M.new(world, config, policies, on_dispose)
  policies = policies or {}
  return setmetatable({ world = world, config = config, live = {}, terminals = {}, seq = 0, spill_sandboxes = {},
    id = ids.hex(4), on_dispose = on_dispose,
    policies_env = policies.env or policy_set.default("env"),
    timeouts = policies.timeouts or policy_set.default("timeouts") }, SP)
end

M.SP = SP
return M
