-- moonbox.subprocess — the subprocess seam over an E2B sandbox (`ctx.subprocess`).
--
-- spawn = ONE process.Process/Start running `mbwrap run` (no shell, no login profile, no
-- polling): the wrapper reports the process-group id, output frames, exit or signal, "tree
-- empty" and completion in band. The stream's raw HTTP body is decoded in C (core.procstream:
-- envelopes, event JSON, base64, frames) straight into the chosen sinks — a tail ring for
-- collect mode, fd 1/2 for inherit, a per-chunk buffer for pipe — so Lua runs once per HTTP
-- chunk, not per frame. The environment is policies/env.lua applied on the host to the ambient
-- environment captured once per sandbox; its values travel in the request's `envs` and
-- `-K NAME` makes the wrapper keep exactly those names. Batch stdin up to 64 KiB rides along as
-- `-i BASE64` (still one request). terminate() = one SendSignal(SIGTERM) to
-- the wrapper, which TERMs the whole tree (double-forked descendants included: it is a child
-- subreaper) and KILLs it after graceMs; `done` reports SIGKILL only once the leader is dead.
-- Terminals: one Start with a PTY, its stream decoded in C too (core.procstream in PTY mode);
-- inspect/signal/terminate use mbwrap fg/signal/killsession.
--
-- Cancellation (the seam's `signal`): spec.cancel is an mb.event(); setting it (ev:set()) starts
-- terminate() of a spawned process, or abandons a terminal's allocation (a terminal that started
-- meanwhile is killed in the background; a published terminal owns its lifetime).
-- Pipe output is flow-controlled (the transfer pauses while the reader is behind), but control
-- facts never wait behind unread data for long: terminate() drops unread pipe output, and once
-- the leader exited and graceMs passed without the stream ending, further output is dropped.
-- Spills live in <runtime root>/processes-<service id>/; mbwrap removes those the tail holds
-- whole (-k) and those of programs that never ran; dispose removes the directory (one request).
-- A process whose stream broke stays tracked; dispose kills it by its ids inside the sandbox.
local errors = require "moonbox.errors"

local M = { name = "subprocess", provides = "subprocess", inject = { "e2b" } }
M.schema = {
  frameLineMax = { type = "number", default = 40000,
    check = function(v) if v < 32769 then return "must admit a whole data frame (>= 32769)" end end },
  pipeQueue = { type = "number", default = 64,
    check = function(v) if v < 1 or v ~= math.floor(v) then return "must be a positive integer" end end },
}

local function mb() return require "moonbox" end
M.STDIN_ARG_MAX = 64 * 1024       -- batch stdin up to this size travels as `mbwrap run -i`
M.MAX_MESSAGE = 4 * 1024 * 1024   -- largest Connect message of a process stream
local FOREVER = 2147483647        -- the longest timer: "no deadline" for waits the caller owns

local SIGNALS = { [1] = "SIGHUP", [2] = "SIGINT", [3] = "SIGQUIT", [4] = "SIGILL", [5] = "SIGTRAP",
  [6] = "SIGABRT", [7] = "SIGBUS", [8] = "SIGFPE", [9] = "SIGKILL", [10] = "SIGUSR1", [11] = "SIGSEGV",
  [12] = "SIGUSR2", [13] = "SIGPIPE", [14] = "SIGALRM", [15] = "SIGTERM", [16] = "SIGSTKFLT",
  [17] = "SIGCHLD", [18] = "SIGCONT", [19] = "SIGSTOP", [20] = "SIGTSTP", [21] = "SIGTTIN",
  [22] = "SIGTTOU", [23] = "SIGURG", [24] = "SIGXCPU", [25] = "SIGXFSZ", [26] = "SIGVTALRM",
  [27] = "SIGPROF", [28] = "SIGWINCH", [29] = "SIGIO", [30] = "SIGPWR", [31] = "SIGSYS" }
M.SIGNALS = SIGNALS
function M.signal_name(n) return SIGNALS[n] or ("SIG" .. tostring(n)) end

-- The sandbox itself is gone (deleted or expired): nothing in it can still run.
function M.sandbox_gone(err)
  if type(err) ~= "table" then return false end
  if err.code == "E2B_UNAVAILABLE" or err.code == "E2B_NOT_FOUND" or err.code == "E2B_HTTP" then
    return (tostring(err.message or "")):lower():find("sandbox was not found", 1, true) ~= nil
  end
  return false
end

------------------------------------------------------------------------------------------------
-- A bounded host pipe between the stream reader and a consumer. put() blocks while it is full
-- (the reader stops reading the HTTP stream: backpressure); drop() discards unread data and
-- makes every later put() return at once, so the reader keeps decoding control facts.
local Pipe = {}
Pipe.__index = Pipe

function M.pipe(max) return setmetatable({ items = {}, head = 1, tail = 0, max = max }, Pipe) end

function Pipe:count() return self.tail - self.head + 1 end

local function pipe_wake(self, key)
  local ev = self[key]
  if ev then self[key] = nil; ev:set(true) end
end

function Pipe:put(v)
  while not self.detached and self:count() >= self.max do
    local ev = self.space_ev or mb().event()
    self.space_ev = ev
    ev:wait(FOREVER)
  end
  if self.detached or self.ended then return end
  self.tail = self.tail + 1
  self.items[self.tail] = v
  pipe_wake(self, "data_ev")
end

-- No more data will come: readers get what is queued, then EOF.
function Pipe:finish()
  self.ended = true
  pipe_wake(self, "data_ev")
end

-- Stop accepting data (later put()s return at once); keep what is queued unless `clear`.
function Pipe:drop(clear)
  self.detached, self.ended = true, true
  if clear then self.items, self.head, self.tail = {}, 1, 0 end
  pipe_wake(self, "space_ev")
  pipe_wake(self, "data_ev")
end

-- → chunk | nil (EOF) | nil, err (MB_TIMEOUT)
function Pipe:read(timeout_ms)
  while self:count() == 0 do
    if self.ended then return nil end
    local ev = self.data_ev or mb().event()
    self.data_ev = ev
    local ok, err = ev:wait(timeout_ms or FOREVER)
    if ok == nil and err then return nil, err end
  end
  local v = self.items[self.head]
  self.items[self.head] = nil
  self.head = self.head + 1
  pipe_wake(self, "space_ev")
  return v
end

-- Watch a cancel token (spec.cancel, an mb.event()) → the watching task (cancel it when done).
local function watch_cancel(token, fn)
  if token == nil then return nil end
  return mb().spawn(function()
    local a, e = token:wait(FOREVER)
    if a == nil and e ~= nil then return end   -- the watcher itself was canceled
    fn()
  end)
end

-- Whole milliseconds for mbwrap's command line (a fractional grace rounds up).
local function whole_ms(ms) return math.tointeger(ms) or math.ceil(ms) end

-- mbwrap killsession: TERM every process of session `pid`, KILL after the grace, return once
-- the session is empty (inside the sandbox, one request).
local function killsession(sb, pid, grace_ms, tool_ms)
  local grace = whole_ms(grace_ms)
  return sb:tool({ "killsession", tostring(pid), tostring(grace) }, { timeout_ms = grace + 10000 + tool_ms })
end

local function check_cancel(token, what)
  if token == nil then return end
  if type(token) ~= "table" or type(token.wait) ~= "function" then
    error(what .. ": cancel must be an mb.event()", 3)
  end
end

-- Go's ProcessState.String() for a signalled PTY process ("signal: killed") → name.
local GO_SIGNALS = { hangup = 1, interrupt = 2, quit = 3, aborted = 6, killed = 9, ["segmentation fault"] = 11,
  ["broken pipe"] = 13, terminated = 15, ["stopped (signal)"] = 19 }
function M.outcome_from_end(e)
  local status = type(e.status) == "string" and e.status or ""
  local sig = status:match("^signal: (.+)$")
  if sig then
    local n = GO_SIGNALS[sig]
    return { signal = n and M.signal_name(n) or ("SIG" .. sig:upper()) }
  end
  return { exitCode = math.tointeger(e.exitCode) or 0 }
end

------------------------------------------------------------------------------------------------
-- Collect mode: a bounded tail with whole-stream offsets, kept in C by the process stream
-- (core.procstream's tail ring); this is the non-consuming reader over it.
local Collector = {}
Collector.__index = Collector

function M.collector(ps, kind, spill, h)
  return setmetatable({ ps = ps, kind = kind, spill = spill, h = h }, Collector)
end

-- Bytes of the stream so far (the whole stream, not just the tail).
function Collector:total() return self.ps:total(self.kind) end

-- Is the spill file the whole stream so far? Not when the stream outgrew its cap, when mbwrap
-- reported removing it (its own stderr: procstream:diag()), when the transport broke, or while
-- `done` was settled by the drain grace before the stream completed.
function Collector:spillValid()
  local sp, h = self.spill, self.h
  if not sp or self.ps:total(self.kind) > sp.maxBytes then return false end
  if self.ps:diag():find("mbwrap: " .. self.kind .. " spill removed", 1, true) then return false end
  if h and (h.transport_error or (h.settled and not h.completed)) then return false end
  return true
end

-- → { text, nextOffset, lossy, spillPath? }
function Collector:readFrom(from)
  local text, next_offset, lossy = self.ps:read_from(self.kind, from or 0)
  local r = { text = text, nextOffset = next_offset, lossy = lossy }
  if lossy and self:spillValid() then r.spillPath = self.spill.path end
  return r
end

------------------------------------------------------------------------------------------------
local Handle = {}
Handle.__index = Handle

local function validate_output(mode, name)
  if mode == "pipe" or mode == "inherit" then return end
  if type(mode) == "table" and type(mode.maxBytes) == "number" and mode.maxBytes >= 0 then
    if mode.spill ~= nil and (type(mode.spill) ~= "table" or type(mode.spill.maxBytes) ~= "number") then
      error(name .. ": spill must be { maxBytes = n }", 4)
    end
    return
  end
  error(name .. ": expected 'pipe', 'inherit' or { maxBytes = n [, spill = { maxBytes = n }] }", 4)
end

-- Pipe endpoint readable by the caller: :read(timeout) → chunk | nil (EOF) | nil, err
local function pipe_reader(p)
  return { read = function(_, timeout_ms) return p:read(timeout_ms) end }
end

-- Stop handing output to pipe readers; the stream keeps being decoded (control facts).
-- clear: also discard what is queued and unread (terminate); otherwise readers keep it.
function Handle:_drop_pipes(clear)
  for _, kind in ipairs({ "stdout", "stderr" }) do
    local p = self.pipes[kind]
    if p and not (p.detached and not clear) then
      p:drop(clear)
      self.ps:discard(kind)
    end
  end
end

function Handle:_settle(outcome, err)
  if self.settled then return end
  self.settled = true
  self.outcome, self.error = outcome, err
  self.done_ev:set(true)
end

-- Control facts that must be acted on before this chunk's output is handed out (the group id
-- comes before any output, and `spawn` waits for it before a pipe reader can exist).
local EARLY = { start = true, pgid = true, spawn_error = true }

-- One control fact from the process stream → nil, or an error that ends the run.
function Handle:_fact(f)
  local k = f.kind
  if k == "start" then
    self.wrapper_pid = math.tointeger(f.pid)
    if self.stdin_pipe then self.stdin_ready:set(true) end
    if self.terminating then                  -- terminate() came before the start event
      self.terminating = false
      mb().spawn(function() self:terminate() end)
    end
  elseif k == "pgid" then
    self.pid = f.value
    self.pid_ev:set(true)
  elseif k == "spawn_error" then
    self.spawn_error = errors.new("SPAWN_FAILED", ("cannot start %q: %s"):format(self.spec.argv[1], f.message),
      { errno = f.errno })
    self.pid_ev:set(false)                 -- no-op once the group id arrived
  elseif k == "exit" or k == "signal" then
    local fact = k == "exit" and { exitCode = f.value } or { signal = M.signal_name(f.value) }
    self.exit_fact = fact
    -- Drain grace: a descendant holding the pipes cannot hold `done`.
    local m = mb()
    m.spawn(function()
      m.sleep(self.spec.graceMs)
      -- the stream is still open (a descendant holds the pipes, or a reader is behind): later
      -- output is dropped so that the remaining facts are never stuck behind it
      if not self.stream_ended then self:_drop_pipes(false) end
      self:_settle(fact)
    end)
  elseif k == "empty" then
    self.tree_empty = true
    self.empty_ev:set(true)
  elseif k == "done" then
    self.completed = true
  elseif k == "stream_error" then
    return require("moonbox.envd").rpc_error("process.Process/Start", f.code, f.message, 200)
  elseif k == "sink_error" then
    self.sink_error = self.sink_error or errors.new("SUBPROCESS_OUTPUT",
      ("%s: cannot write inherited output: %s"):format(f.stream, f.message), { errno = f.errno })
  end
end

-- End of output for pipe readers (once).
function Handle:_eof()
  self.stream_ended = true
  for _, kind in ipairs({ "stdout", "stderr" }) do
    if self.pipes[kind] then self.pipes[kind]:finish() end
  end
end

-- The stream's raw HTTP body goes chunk by chunk into the C process stream (envelopes, event
-- JSON, base64, frames and the output sinks are all decoded there): one call per chunk.
function Handle:_run(s)
  local ps = self.ps
  local idle = self.sp.timeouts.stream_idle_ms
  local function fail(err)
    s:close()
    self.transport_error = err
    if self.stdin_pipe and not self.wrapper_pid then self.stdin_ready:set(false) end
    self.pid_ev:set(false)                 -- no-op once the group id arrived
    self.empty_ev:set(false)          -- waitForExit must not wait for a fact that cannot come
    self:_eof()
    self:_settle(nil, err)
  end
  while true do
    local chunk, err = s:read_raw(idle)
    if chunk == nil then
      if err then return fail(err) end
      break
    end
    local r, perr = ps:push(chunk)
    if not r then return fail(perr) end
    for i = 1, #r do if EARLY[r[i].kind] then self:_fact(r[i]) end end
    if r.stdout then self.pipes.stdout:put(r.stdout) end
    if r.stderr then self.pipes.stderr:put(r.stderr) end
    for i = 1, #r do
      if not EARLY[r[i].kind] then
        local ferr = self:_fact(r[i])
        if ferr then return fail(ferr) end
      end
    end
  end
  s:close()
  local ok, ferr = ps:finish()
  self:_eof()
  if not ok then return fail(ferr) end
  if self.spawn_error then
    self.tree_empty = true; self.empty_ev:set(true)
    return self:_settle(nil, self.spawn_error)
  end
  if not self.exit_fact then
    return fail(errors.new("E2B_PROTOCOL", "mbwrap ended without an exit fact: " .. ps:diag()))
  end
  self:_settle(self.exit_fact)
end

-- → { exitCode = n } or { signal = "SIGKILL" } | nil, err (spawn failure, transport failure, MB_TIMEOUT)
function Handle:wait(timeout_ms)
  local ok, err = self.done_ev:wait(timeout_ms or FOREVER)
  if not ok and not self.settled then return nil, err end
  if self.error then return nil, self.error end
  return self.outcome
end
Handle.done = Handle.wait

-- The service stops tracking this handle (and watching its cancel token).
function Handle:_untrack()
  self.sp.live[self] = nil
  if self.cancel_task then self.cancel_task:cancel() end
end

-- The tree is known to be gone without the stream saying so (sandbox gone, session killed).
function Handle:_gone()
  self.tree_empty = true
  self.empty_ev:set(true)
  self:_untrack()
end

-- SIGTERM to the wrapper (one SendSignal): it TERMs the whole tree and KILLs it after graceMs.
function Handle:_term_wrapper()
  return self.sb.envd:unary("process.Process/SendSignal",
    { process = { pid = self.wrapper_pid }, signal = "SIGNAL_SIGTERM" })
end

-- The stream carrying the facts broke while the tree may still run: TERM the wrapper (it
-- TERMs/KILLs the whole tree, double-forked descendants included) and kill the program's
-- session by its id inside the sandbox, which returns once the session is empty.
function Handle:_kill_detached()
  if self.tree_empty then return true end
  if self.wrapper_pid then
    local _, err = self:_term_wrapper()
    if err and M.sandbox_gone(err) then self:_gone() return true end
  end
  if (self.pid or -1) <= 1 then                   -- the program never got a group id
    self:_gone()
    return true
  end
  local _, err = killsession(self.sb, self.pid, self.spec.graceMs, self.sp.timeouts.tool_ms)
  if err and not M.sandbox_gone(err) then return nil, err end
  self:_gone()
  return true
end

-- TERM to the whole tree, KILL after graceMs (the wrapper does both). Idempotent. Unread pipe
-- output is dropped at once: the exit facts must not wait behind it.
function Handle:terminate()
  if self.tree_empty then return true end
  self:_drop_pipes(true)
  if self.transport_error then return self:_kill_detached() end
  if self.terminating then return true end
  self.terminating = true
  for _, kind in ipairs({ "stdout", "stderr" }) do  -- inherited output ends with the request
    if self.spec.stdio[kind] == "inherit" then self.ps:discard(kind) end
  end
  if not self.wrapper_pid then return true end     -- sent when the start event arrives
  local _, err = self:_term_wrapper()
  if err and M.sandbox_gone(err) then self:_gone() return true end
  if err and err.code ~= "E2B_NOT_FOUND" then
    self.terminating = false
    if self.transport_error then return self:_kill_detached() end
    return nil, err
  end
  return true
end

-- true once no process of the tree is left; false when timeout_ms elapsed first;
-- nil, err when the stream carrying the facts broke (the tree's state is unknown).
function Handle:waitForExit(timeout_ms)
  if self.tree_empty then return true end
  local ok = self.empty_ev:wait(timeout_ms or FOREVER)
  if ok then return true end
  if self.transport_error then return nil, self.transport_error end
  return false
end

local function stdin_writer(self)
  local core = self.sb.core
  return {
    write = function(_, data)
      if self.stdin_closed then return nil, errors.new("SUBPROCESS_STDIN_CLOSED", "stdin is closed") end
      self.stdin_ready:wait(FOREVER)
      if not self.wrapper_pid then return nil, self.error or errors.new("SPAWN_FAILED", "process did not start") end
      local r, err = self.sb.envd:unary("process.Process/SendInput",
        { process = { pid = self.wrapper_pid }, input = { stdin = core.b64encode(data) } })
      if not r then return nil, err end
      return true
    end,
    close = function()
      if self.stdin_closed then return true end
      self.stdin_closed = true
      self.stdin_ready:wait(FOREVER)
      if not self.wrapper_pid then return true end
      local r, err = self.sb.envd:unary("process.Process/CloseStdin", { process = { pid = self.wrapper_pid } })
      if not r and err.code ~= "E2B_NOT_FOUND" then return nil, err end
      return true
    end,
  }
end

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
  return self.owner:sandbox()
end

function SP:_env(sb, explicit)
  return self.policies_env.build(sb.ambient, explicit)
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

-- spec: { argv, cwd, stdio = { stdin, stdout, stderr }, graceMs, env }
-- Blocks until the wrapper reports the process-group id (so `pid` is real) → handle | nil, err
function SP:spawn(spec)
  if self.disposing then error("subprocess service is disposing", 2) end
  if type(spec) ~= "table" then error("spawn: spec must be a table", 2) end
  if type(spec.argv) ~= "table" or type(spec.argv[1]) ~= "string" or spec.argv[1] == "" then
    error("invalid argv: expected a non-empty program name at argv[1]", 2)
  end
  for i, a in ipairs(spec.argv) do
    if type(a) ~= "string" or a:find("\0", 1, true) then error(("invalid argv[%d]: strings without NUL"):format(i), 2) end
  end
  if type(spec.cwd) ~= "string" or spec.cwd == "" then error("spawn: cwd is required", 2) end
  self.timeouts.check_grace(spec.graceMs, "subprocess graceMs")
  local stdio = spec.stdio
  if type(stdio) ~= "table" then error("spawn: stdio is required", 2) end
  local sin = stdio.stdin
  if not (sin == "ignore" or sin == "pipe" or (type(sin) == "table" and type(sin.data) == "string")) then
    error("spawn: stdin must be 'ignore', 'pipe' or { data = string }", 2)
  end
  validate_output(stdio.stdout, "stdout")
  validate_output(stdio.stderr, "stderr")
  check_cancel(spec.cancel, "spawn")
  if spec.cancel and spec.cancel.is_set then
    return nil, errors.new("SUBPROCESS_CANCELED", "aborted before spawn")
  end

  local sb, err = self:_sandbox()
  if not sb then return nil, err end
  local env = self:_env(sb, spec.env)           -- raises on invalid entries (before launch)
  local m = mb()
  local h = setmetatable({ sp = self, sb = sb, spec = spec, pid = -1, pipes = {}, collected = {},
    done_ev = m.event(), pid_ev = m.event(), empty_ev = m.event(), stdin_ready = m.event() }, Handle)

  self.seq = self.seq + 1
  local args = { "run", "-g", tostring(whole_ms(spec.graceMs)) }
  local sinks = {}
  for _, kind in ipairs({ "stdout", "stderr" }) do
    local mode = stdio[kind]
    if mode == "pipe" then
      h.pipes[kind] = M.pipe(self.config.pipeQueue)
      h[kind] = pipe_reader(h.pipes[kind])
      sinks[kind] = "buffer"
    elseif mode == "inherit" then
      sinks[kind] = { fd = kind == "stdout" and 1 or 2 }
    else
      local spill
      local tail = math.tointeger(mode.maxBytes) or math.floor(mode.maxBytes)
      if mode.spill then
        spill = { maxBytes = mode.spill.maxBytes, path = ("%s/spill-%d-%s.%s.log"):format(M.spill_dir(sb, self.id),
          self.seq, require("moonbox.e2b").random_hex(4), kind) }
        args[#args + 1] = kind == "stdout" and "-o" or "-e"
        args[#args + 1] = spill.path .. ":" .. (math.tointeger(spill.maxBytes) or math.floor(spill.maxBytes))
        -- mbwrap removes the spill at the end when the tail holds the whole stream
        args[#args + 1] = "-k"; args[#args + 1] = (kind == "stdout" and "o:" or "e:") .. tail
        self.spill_sandboxes[sb] = true
      end
      sinks[kind] = { tail = tail }
      h.collected[kind] = spill
    end
  end
  h.ps = sb.core.procstream{ max_message = M.MAX_MESSAGE, max_line = self.config.frameLineMax,
    stdout = sinks.stdout, stderr = sinks.stderr }
  for _, kind in ipairs({ "stdout", "stderr" }) do
    if sinks[kind].tail then h.collected[kind] = M.collector(h.ps, kind, h.collected[kind], h) end
  end
  -- The environment's values travel in the request's `envs` (not on the wrapper's command
  -- line); `-K NAME` tells the wrapper to keep exactly those names and drop what envd added.
  local envs = {}
  for _, entry in ipairs(self.policies_env.serialize(env)) do
    local name, value = entry:match("^([^=]*)=(.*)$")
    envs[name] = value
    args[#args + 1] = "-K"; args[#args + 1] = name
  end
  -- Batch stdin up to STDIN_ARG_MAX rides on the command line (`-i BASE64`): one request.
  local stdin_data = type(sin) == "table" and sin.data or nil
  if stdin_data and #stdin_data <= M.STDIN_ARG_MAX then
    args[#args + 1] = "-i"; args[#args + 1] = sb.core.b64encode(stdin_data)
    stdin_data = nil
  end
  h.stdin_pipe = sin == "pipe" or stdin_data ~= nil
  args[#args + 1] = "--"
  for _, a in ipairs(spec.argv) do args[#args + 1] = a end

  local s, serr = sb.envd:stream("process.Process/Start", {
    process = { cmd = sb.wrapper, args = args, envs = envs, cwd = spec.cwd }, stdin = h.stdin_pipe,
  })
  if not s then return nil, M.start_error(serr, spec) end
  self.live[h] = true
  h.reader = m.spawn(function()
    h:_run(s)
    -- auto-release once the tree is gone; a broken stream leaves it tracked (dispose kills it)
    if h.tree_empty then h:_untrack() end
  end)
  h.cancel_task = watch_cancel(spec.cancel, function()
    if not h.tree_empty then h:terminate() end
  end)
  if sin == "pipe" then h.stdin = stdin_writer(h) end

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
    local w = stdin_writer(h)
    local wok, wr = w:write(stdin_data)
    if wok then wok, wr = w:close() end
    if not wok and wr.code ~= "E2B_NOT_FOUND" and wr.code ~= "E2B_INTERNAL" then h.stdin_error = wr end
  end
  return h
end

------------------------------------------------------------------------------------------------
-- Terminals
local Term = {}
Term.__index = Term

function Term:_op(fn)
  if self.closing then return nil, errors.new("TERMINAL_CLOSED", "terminal is terminating") end
  self.inflight = self.inflight + 1
  local r = table.pack(pcall(fn))
  self.inflight = self.inflight - 1
  if self.inflight == 0 and self.idle_ev then self.idle_ev:set(true) end
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function Term:write(data)
  if self.exited then return nil, errors.new("TERMINAL_EXITED", "terminal process has exited") end
  return self:_op(function()
    local r, err = self.sb.envd:unary("process.Process/SendInput",
      { process = { pid = self.pid }, input = { pty = self.sb.core.b64encode(data) } })
    if not r then return nil, err end
    return true
  end)
end

function Term:resize(rows, cols)
  return self:_op(function()
    local r, err = self.sb.envd:unary("process.Process/Update",
      { process = { pid = self.pid }, pty = { size = { cols = cols, rows = rows } } })
    if not r then return nil, err end
    return true
  end)
end

function Term:_fg()
  local out, err = self.sb:tool({ "fg", tostring(self.pid) })
  if not out then return nil, err end
  if out == "absent\n" then return false end
  local pg, iw = out:match("^(%-?%d+) ([01])\n$")
  if not pg then return nil, errors.new("E2B_PROTOCOL", "mbwrap fg: malformed output") end
  return { processGroupId = math.tointeger(tonumber(pg)), inputWaiting = iw == "1" }
end

-- → { processGroupId, inputWaiting } | false (the top level has exited) | nil, err
function Term:inspectForeground()
  if self.exited then return false end
  return self:_op(function() return self:_fg() end)
end

local TERMINAL_SIGNALS = { SIGINT = true, SIGTERM = true, SIGKILL = true, SIGTSTP = true, SIGHUP = true }

-- → the process-group id that received the signal | nil, err
function Term:signalForeground(sig)
  if not TERMINAL_SIGNALS[sig] then error("signalForeground: unsupported signal " .. tostring(sig), 2) end
  return self:_op(function()
    local fg, err = self:_fg()
    if not fg then return nil, err or errors.new("TERMINAL_EXITED", "terminal process has exited") end
    local pg = fg.processGroupId
    if pg <= 1 then return nil, errors.new("TERMINAL_NO_FOREGROUND", "terminal has no foreground process group") end
    if sig == "SIGKILL" and pg == self.pid then
      return nil, errors.new("TERMINAL_REFUSED", "refusing to SIGKILL the terminal shell; terminate the terminal session instead")
    end
    local _, serr = self.sb:tool({ "signal", tostring(pg), sig })
    if serr then return nil, serr end
    return pg
  end)
end

-- Output: :read(timeout) → chunk | nil (ended after the top-level exit) | nil, err
function Term:read(timeout_ms)
  local v, err = self.q:read(timeout_ms)
  if v == nil and err == nil then return nil, self.error end
  return v, err
end

function Term:wait(timeout_ms)
  local ok, err = self.done_ev:wait(timeout_ms or FOREVER)
  if not ok and not self.exited then return nil, err end
  if self.error then return nil, self.error end
  return self.outcome
end
Term.done = Term.wait

-- A failed terminate(): callers waiting on this attempt get err; a later call tries again.
function Term:_terminate_failed(err)
  self.terminating, self.closing = false, false
  self.term_error = err
  self.term_ev:set(true); self.term_ev = mb().event()
  return nil, err
end

-- TERM every process of the session, KILL after the grace, until it is empty (inside the
-- sandbox, one request), then wait for the top level. Idempotent; in-flight calls finish first.
function Term:terminate()
  if self.terminated then return true end
  if self.terminating then
    self.term_ev:wait(FOREVER)
    if self.terminated then return true end
    return nil, self.term_error
  end
  self.terminating = true
  self.closing = true
  self.q:drop(true)                  -- unread output must not keep the reader from the exit
  if self.inflight > 0 then
    self.idle_ev = mb().event()
    self.idle_ev:wait(FOREVER)
  end
  local _, err = killsession(self.sb, self.pid, self.graceMs, self.sp.timeouts.tool_ms)
  if err and not M.sandbox_gone(err) then return self:_terminate_failed(err) end
  -- quiescence includes the top level: its exit must be observed on the stream
  local seen, werr = self.done_ev:wait(self.sp.timeouts.request_ms)
  if seen == nil and not self.exited then
    return self:_terminate_failed(errors.new("TERMINAL_TEARDOWN",
      "terminal session killed but its exit was not observed: " .. tostring(werr), { cause = werr }))
  end
  self.terminated = true
  self.term_ev:set(true)
  self.sp.terminals[self] = nil
  return true
end

-- The stream's raw HTTP body goes chunk by chunk into a PTY-mode process stream (envelopes,
-- event JSON and the base64 of data.pty decoded in C): one output hand-off per chunk.
function Term:_run(s)
  local ps = self.ps
  local idle = self.sp.timeouts.stream_idle_ms
  while true do
    local chunk, err = s:read_raw(idle)
    if chunk == nil then
      if err then self.error = err
      else
        local ok, ferr = ps:finish()
        if not ok then self.error = ferr end
      end
      break
    end
    local r, perr = ps:push(chunk)
    if not r then self.error = perr; break end
    for i = 1, #r do
      if r[i].kind == "start" then
        self.pid = math.tointeger(r[i].pid)
        self.started:set(true)
        self.start_seen:set(true)
      end
    end
    if r.stdout then self.q:put(r.stdout) end
    local stop = false
    for i = 1, #r do
      local f = r[i]
      if f.kind == "end" then
        self.outcome = M.outcome_from_end{ exitCode = f.exit_code, status = f.status }
      elseif f.kind == "stream_error" then
        self.error = require("moonbox.envd").rpc_error("process.Process/Start", f.code, f.message, 200)
        stop = true
      end
    end
    if stop then break end
  end
  s:close()
  if not self.outcome and not self.error then
    self.error = errors.new("E2B_PROTOCOL", "terminal stream ended without an end event")
  end
  self.exited = true
  self.q:finish()
  self.started:set(false)
  self.start_seen:set(false)
  self.done_ev:set(true)
end

-- spec: { argv, cwd, env, rows, cols, graceMs, cancel } → terminal | nil, err
-- spec.cancel (an mb.event()) cancels the allocation only (SUBPROCESS_CANCELED).
function SP:spawnTerminal(spec)
  if self.disposing then error("subprocess service is disposing", 2) end
  if type(spec) ~= "table" or type(spec.argv) ~= "table" or type(spec.argv[1]) ~= "string" or spec.argv[1] == "" then
    error("terminal argv must contain a program", 2)
  end
  if spec.argv[1]:find("=", 1, true) then error("terminal program name must not contain '='", 2) end
  for i, a in ipairs(spec.argv) do
    if type(a) ~= "string" or a:find("\0", 1, true) then error(("terminal argv[%d] must be a string without NUL"):format(i), 2) end
  end
  local grace = spec.graceMs or self.timeouts.terminal_grace_ms
  self.timeouts.check_grace(grace, "terminal graceMs")
  check_cancel(spec.cancel, "spawnTerminal")
  local canceled = errors.new("SUBPROCESS_CANCELED", "terminal allocation canceled")
  if spec.cancel and spec.cancel.is_set then return nil, canceled end
  local rows, cols = spec.rows or 24, spec.cols or 80
  local sb, err = self:_sandbox()
  if not sb then return nil, err end
  local env = self:_env(sb, spec.env)
  -- `env -i` gives the program exactly the scrubbed environment (envd adds its own otherwise).
  local args = { "-i" }
  for _, entry in ipairs(self.policies_env.serialize(env)) do args[#args + 1] = entry end
  for _, a in ipairs(spec.argv) do args[#args + 1] = a end
  local m = mb()
  local t = setmetatable({ sp = self, sb = sb, graceMs = grace, inflight = 0, q = M.pipe(self.config.pipeQueue),
    done_ev = m.event(), started = m.event(), start_seen = m.event(), term_ev = m.event(),
    ps = sb.core.procstream{ max_message = M.MAX_MESSAGE, pty = true, stdout = "buffer" } }, Term)
  local cwd = spec.cwd or sb.cwd
  local s, serr = sb.envd:stream("process.Process/Start", {
    process = { cmd = "/usr/bin/env", args = args, cwd = cwd },
    pty = { size = { cols = cols, rows = rows } },
  })
  if not s then return nil, M.start_error(serr, { argv = spec.argv, cwd = cwd }) end
  t.reader = m.spawn(function() t:_run(s) end)
  local watcher = watch_cancel(spec.cancel, function() t.started:set(false, canceled) end)
  local limit = self.timeouts.stream_open_ms + self.timeouts.request_ms
  local ok, werr = t.started:wait(limit)
  if watcher then watcher:cancel() end
  if not ok then
    if werr ~= nil and not t.exited then
      -- canceled or timed out: a PTY that starts anyway is killed in the background
      m.spawn(function()
        t.q:drop(true)
        t.start_seen:wait(limit)
        if t.pid and not t.exited then
          killsession(t.sb, t.pid, grace, self.timeouts.tool_ms)
        end
        s:close()
      end)
    else
      s:close()
    end
    return nil, werr or t.error or errors.new("E2B_PROTOCOL", "terminal did not start")
  end
  self.terminals[t] = true
  t.output = { read = function(_, timeout_ms) return t:read(timeout_ms) end }
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
  end
  for t in pairs(self.terminals) do
    local ok, err = t:terminate()
    if not ok then first = first or err end
  end
  for sb in pairs(self.spill_sandboxes) do
    local _, err = sb.envd:unary("filesystem.Filesystem/Remove", { path = M.spill_dir(sb, self.id) })
    if err and err.code ~= "E2B_NOT_FOUND" and not M.sandbox_gone(err) then first = first or err end
    self.spill_sandboxes[sb] = nil
  end
  if first then return nil, first end
  return true
end

function M.new(ctx, config)
  assert(ctx.e2b, "subprocess: the e2b owner must load first")
  local policies = ctx.policies or {}
  return setmetatable({ owner = ctx.e2b, config = config, live = {}, terminals = {}, seq = 0, spill_sandboxes = {},
    id = require("moonbox.e2b").random_hex(4),
    policies_env = policies.env or require("policies.env"),
    timeouts = policies.timeouts or require("policies.timeouts") }, SP)
end

M.Handle, M.Term, M.SP = Handle, Term, SP
return M
