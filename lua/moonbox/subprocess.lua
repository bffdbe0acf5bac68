-- moonbox.subprocess — the subprocess seam over an E2B sandbox (`ctx.subprocess`).
--
-- spawn = ONE process.Process/Start running `mbwrap run` (no shell, no login profile, no
-- polling): the wrapper reports the process-group id, output frames, exit or signal, "tree
-- empty" and completion in band. The environment is policies/env.lua applied on the host to
-- the ambient environment captured once per sandbox. terminate() = one SendSignal(SIGTERM) to
-- the wrapper, which TERMs the whole tree (double-forked descendants included: it is a child
-- subreaper) and KILLs it after graceMs; `done` reports SIGKILL only once the leader is dead.
-- Terminals: one Start with a PTY; inspect/signal/terminate use mbwrap fg/signal/killsession.
local errors = require "moonbox.errors"

local M = { name = "subprocess", provides = "subprocess", inject = { "e2b" } }
M.schema = {
  frameLineMax = { type = "number", default = 40000,
    check = function(v) if v < 32769 then return "must admit a whole data frame (>= 32769)" end end },
  pipeQueue = { type = "number", default = 64,
    check = function(v) if v < 1 or v ~= math.floor(v) then return "must be a positive integer" end end },
}

local function mb() return require "moonbox" end
local FOREVER = 2147483647        -- the longest timer: "no deadline" for waits the caller owns

local SIGNALS = { [1] = "SIGHUP", [2] = "SIGINT", [3] = "SIGQUIT", [4] = "SIGILL", [5] = "SIGTRAP",
  [6] = "SIGABRT", [7] = "SIGBUS", [8] = "SIGFPE", [9] = "SIGKILL", [10] = "SIGUSR1", [11] = "SIGSEGV",
  [12] = "SIGUSR2", [13] = "SIGPIPE", [14] = "SIGALRM", [15] = "SIGTERM", [16] = "SIGSTKFLT",
  [17] = "SIGCHLD", [18] = "SIGCONT", [19] = "SIGSTOP", [20] = "SIGTSTP", [21] = "SIGTTIN",
  [22] = "SIGTTOU", [23] = "SIGURG", [24] = "SIGXCPU", [25] = "SIGXFSZ", [26] = "SIGVTALRM",
  [27] = "SIGPROF", [28] = "SIGWINCH", [29] = "SIGIO", [30] = "SIGPWR", [31] = "SIGSYS" }
M.SIGNALS = SIGNALS
function M.signal_name(n) return SIGNALS[n] or ("SIG" .. tostring(n)) end

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
-- Collect mode: bounded tail with whole-stream offsets (non-consuming readers).
local Collector = {}
Collector.__index = Collector

function M.collector(max_bytes, spill)
  return setmetatable({ max = max_bytes, chunks = {}, held = 0, total = 0, spill = spill }, Collector)
end

function Collector:add(data)
  self.total = self.total + #data
  self.chunks[#self.chunks + 1] = data
  self.held = self.held + #data
  while self.held > self.max and #self.chunks > 0 do
    local first = self.chunks[1]
    local extra = self.held - self.max
    if #first <= extra then
      table.remove(self.chunks, 1)
      self.held = self.held - #first
    else
      self.chunks[1] = first:sub(extra + 1)
      self.held = self.held - extra
    end
  end
end

-- → { text, nextOffset, lossy, spillPath? }
function Collector:readFrom(from)
  from = from or 0
  local start = self.total - self.held
  local all = table.concat(self.chunks)
  self.chunks = { all }
  local lossy = from < start
  local r = { nextOffset = self.total, lossy = lossy }
  if lossy then r.text = all else r.text = all:sub(from - start + 1) end
  if lossy and self.spill and self.total <= self.spill.maxBytes then r.spillPath = self.spill.path end
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

local function b64(core, s) return core.b64encode(s) end

-- Pipe endpoint readable by the caller: :read(timeout) → chunk | nil (EOF) | nil, err
local function pipe_reader(q)
  return { read = function(_, timeout_ms)
    local v, err = q:pop(timeout_ms or FOREVER)
    if v == nil then return nil, err end
    if v == false then return nil end
    return v
  end }
end

function Handle:_sink(kind, data)
  local mode = kind == "stdout" and self.spec.stdio.stdout or self.spec.stdio.stderr
  if self.terminating and mode ~= "pipe" and type(mode) ~= "table" then return end
  if mode == "pipe" then
    self.queues[kind]:push(data, FOREVER)
  elseif mode == "inherit" then
    local f = kind == "stdout" and io.stdout or io.stderr
    f:write(data); f:flush()
  else
    self.collected[kind]:add(data)
  end
end

function Handle:_settle(outcome, err)
  if self.settled then return end
  self.settled = true
  self.outcome, self.error = outcome, err
  self.done_ev:set(true)
end

function Handle:_run(s)
  local m, core = mb(), self.sb.core
  local dec = core.frame_decoder(self.sp.config.frameLineMax)
  local exit_fact
  local function fail(err)
    self.transport_error = err
    if not self.pid_ev_set then self.pid_ev_set = true; self.pid_ev:set(false) end
    self.empty_ev:set(false)          -- waitForExit must not wait for a fact that cannot come
    self:_settle(nil, err)
  end
  while true do
    local msg, err = s:next(self.sp.timeouts.stream_idle_ms)
    if not msg then
      if err then return fail(err) end
      break
    end
    local ev = msg.event or {}
    if ev.start then
      self.wrapper_pid = math.tointeger(ev.start.pid)
      if self.spec.stdio.stdin ~= "ignore" then self.stdin_ready:set(true) end
      if self.terminating then                  -- terminate() came before the start event
        self.terminating = false
        m.spawn(function() self:terminate() end)
      end
    elseif ev.data and ev.data.stdout then
      local frames, ferr = dec:push(core.b64decode(ev.data.stdout))
      if not frames then s:close() return fail(ferr) end
      for _, f in ipairs(frames) do
        local k = f.kind
        if k == "stdout" or k == "stderr" then
          self:_sink(k, f.data)
        elseif k == "pgid" then
          self.pid = f.value
          self.pid_ev_set = true
          self.pid_ev:set(true)
        elseif k == "spawn_error" then
          self.spawn_error = errors.new("SPAWN_FAILED", ("cannot start %q: %s"):format(self.spec.argv[1], f.message),
            { errno = f.errno })
          if not self.pid_ev_set then self.pid_ev_set = true; self.pid_ev:set(false) end
        elseif k == "exit" or k == "signal" then
          exit_fact = k == "exit" and { exitCode = f.value } or { signal = M.signal_name(f.value) }
          -- Drain grace: a descendant holding the pipes cannot hold `done`.
          m.spawn(function()
            m.sleep(self.spec.graceMs)
            self:_settle(exit_fact)
          end)
        elseif k == "empty" then
          self.tree_empty = true
          self.empty_ev:set(true)
        elseif k == "done" then
          self.completed = true
        end
      end
    elseif ev.data and ev.data.stderr then
      local d = core.b64decode(ev.data.stderr)
      self.diag = (self.diag or "") .. d:sub(1, 4096 - #(self.diag or ""))
    end
  end
  local ok, ferr = dec:finish()
  for _, kind in ipairs({ "stdout", "stderr" }) do
    if self.queues[kind] then self.queues[kind]:push(false, FOREVER) end
  end
  if not ok then return fail(ferr) end
  if self.spawn_error then
    self.tree_empty = true; self.empty_ev:set(true)
    return self:_settle(nil, self.spawn_error)
  end
  if not exit_fact then
    return fail(errors.new("E2B_PROTOCOL", "mbwrap ended without an exit fact: " .. (self.diag or "")))
  end
  self:_settle(exit_fact)
end

-- → { exitCode = n } or { signal = "SIGKILL" } | nil, err (spawn failure, transport failure, MB_TIMEOUT)
function Handle:wait(timeout_ms)
  local ok, err = self.done_ev:wait(timeout_ms or FOREVER)
  if not ok and not self.settled then return nil, err end
  if self.error then return nil, self.error end
  return self.outcome
end
Handle.done = Handle.wait

-- TERM to the whole tree, KILL after graceMs (the wrapper does both). Idempotent.
function Handle:terminate()
  if self.terminating or self.tree_empty then return true end
  self.terminating = true
  if not self.wrapper_pid then return true end
  local _, err = self.sb.envd:unary("process.Process/SendSignal",
    { process = { pid = self.wrapper_pid }, signal = "SIGNAL_SIGTERM" })
  if err and err.code ~= "E2B_NOT_FOUND" then
    self.terminating = false
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
        { process = { pid = self.wrapper_pid }, input = { stdin = b64(core, data) } })
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

  local sb, err = self:_sandbox()
  if not sb then return nil, err end
  local env = self:_env(sb, spec.env)           -- raises on invalid entries (before launch)
  local m = mb()
  local h = setmetatable({ sp = self, sb = sb, spec = spec, pid = -1, queues = {}, collected = {},
    done_ev = m.event(), pid_ev = m.event(), empty_ev = m.event(), stdin_ready = m.event() }, Handle)

  self.seq = self.seq + 1
  local args = { "run", "-g", tostring(math.tointeger(spec.graceMs) or math.ceil(spec.graceMs)) }
  for _, kind in ipairs({ "stdout", "stderr" }) do
    local mode = stdio[kind]
    if mode == "pipe" then
      h.queues[kind] = m.queue(self.config.pipeQueue)
      h[kind] = pipe_reader(h.queues[kind])
    elseif type(mode) == "table" then
      local spill
      if mode.spill then
        spill = { maxBytes = mode.spill.maxBytes, path = ("%s/spill-%d-%s.%s.log"):format(sb.root, self.seq,
          require("moonbox.e2b").random_hex(4), kind) }
        args[#args + 1] = kind == "stdout" and "-o" or "-e"
        args[#args + 1] = spill.path .. ":" .. math.tointeger(spill.maxBytes)
      end
      h.collected[kind] = M.collector(mode.maxBytes, spill)
    end
  end
  for _, entry in ipairs(self.policies_env.serialize(env)) do
    args[#args + 1] = "-E"; args[#args + 1] = entry
  end
  args[#args + 1] = "--"
  for _, a in ipairs(spec.argv) do args[#args + 1] = a end

  local s, serr = sb.envd:stream("process.Process/Start", {
    process = { cmd = sb.wrapper, args = args, cwd = spec.cwd }, stdin = sin ~= "ignore",
  })
  if not s then return nil, serr end
  self.live[h] = true
  h.reader = m.spawn(function()
    h:_run(s)
    -- auto-release once the tree is gone
    if h.tree_empty or h.error then self.live[h] = nil end
  end)
  if sin == "pipe" then h.stdin = stdin_writer(h) end

  local ok, werr = h.pid_ev:wait(self.timeouts.stream_open_ms + self.timeouts.request_ms)
  if not ok then
    if werr then                                  -- canceled or timed out: do not leave it running
      h:terminate()
      return nil, werr
    end
    self.live[h] = nil
    return nil, h.spawn_error or h.error or errors.new("SPAWN_FAILED", "process did not start")
  end
  -- An exec failure usually arrives with the group id; later ones fail `wait` instead.
  if h.spawn_error then
    self.live[h] = nil
    return nil, h.spawn_error
  end
  if type(sin) == "table" then
    local w = stdin_writer(h)
    local wok, wr = w:write(sin.data)
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
  local v, err = self.q:pop(timeout_ms or FOREVER)
  if v == nil then return nil, err end
  if v == false then return nil, self.error end
  return v
end

function Term:wait(timeout_ms)
  local ok, err = self.done_ev:wait(timeout_ms or FOREVER)
  if not ok and not self.exited then return nil, err end
  if self.error then return nil, self.error end
  return self.outcome
end
Term.done = Term.wait

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
  if self.inflight > 0 then
    self.idle_ev = mb().event()
    self.idle_ev:wait(FOREVER)
  end
  local _, err = self.sb:tool({ "killsession", tostring(self.pid), tostring(math.tointeger(self.graceMs)) },
    { timeout_ms = self.graceMs + 10000 + self.sp.timeouts.tool_ms })
  if err then
    self.terminating, self.closing = false, false
    self.term_error = err
    self.term_ev:set(true); self.term_ev = mb().event()
    return nil, err
  end
  self.done_ev:wait(self.sp.timeouts.request_ms)
  self.terminated = true
  self.term_ev:set(true)
  self.sp.terminals[self] = nil
  return true
end

function Term:_run(s)
  local core = self.sb.core
  while true do
    local msg, err = s:next(self.sp.timeouts.stream_idle_ms)
    if not msg then
      if err then self.error = err end
      break
    end
    local ev = msg.event or {}
    if ev.start then
      self.pid = math.tointeger(ev.start.pid)
      self.started:set(true)
    elseif ev.data and ev.data.pty then
      self.q:push(core.b64decode(ev.data.pty), FOREVER)
    elseif ev["end"] then
      self.outcome = M.outcome_from_end(ev["end"])
    end
  end
  if not self.outcome and not self.error then
    self.error = errors.new("E2B_PROTOCOL", "terminal stream ended without an end event")
  end
  self.exited = true
  self.q:push(false, FOREVER)
  self.started:set(false)
  self.done_ev:set(true)
end

-- spec: { argv, cwd, env, rows, cols, graceMs } → terminal | nil, err
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
  local rows, cols = spec.rows or 24, spec.cols or 80
  local sb, err = self:_sandbox()
  if not sb then return nil, err end
  local env = self:_env(sb, spec.env)
  -- `env -i` gives the program exactly the scrubbed environment (envd adds its own otherwise).
  local args = { "-i" }
  for _, entry in ipairs(self.policies_env.serialize(env)) do args[#args + 1] = entry end
  for _, a in ipairs(spec.argv) do args[#args + 1] = a end
  local m = mb()
  local t = setmetatable({ sp = self, sb = sb, graceMs = grace, inflight = 0, q = m.queue(self.config.pipeQueue),
    done_ev = m.event(), started = m.event(), term_ev = m.event() }, Term)
  local s, serr = sb.envd:stream("process.Process/Start", {
    process = { cmd = "/usr/bin/env", args = args, cwd = spec.cwd or sb.cwd },
    pty = { size = { cols = cols, rows = rows } },
  })
  if not s then return nil, serr end
  t.reader = m.spawn(function() t:_run(s) end)
  local ok, werr = t.started:wait(self.timeouts.stream_open_ms + self.timeouts.request_ms)
  if not ok then
    s:close()
    return nil, werr or t.error or errors.new("E2B_PROTOCOL", "terminal did not start")
  end
  self.terminals[t] = true
  t.output = { read = function(_, timeout_ms) return t:read(timeout_ms) end }
  return t
end

-- Disposal: terminate every live process and terminal and wait for their trees.
function SP:dispose()
  self.disposing = true
  local first
  for h in pairs(self.live) do
    if not h.tree_empty and not h.error then
      local ok, err = h:terminate()
      if not ok then first = first or err end
    end
  end
  for h in pairs(self.live) do
    if not h.tree_empty and not h.error then
      local done = h:waitForExit(h.spec.graceMs + self.timeouts.request_ms)
      if not done then first = first or errors.new("SUBPROCESS_TEARDOWN", "a process tree survived disposal") end
    end
    self.live[h] = nil
  end
  for t in pairs(self.terminals) do
    local ok, err = t:terminate()
    if not ok then first = first or err end
  end
  if first then return nil, first end
  return true
end

function M.new(ctx, config)
  assert(ctx.e2b, "subprocess: the e2b owner must load first")
  local policies = ctx.policies or {}
  return setmetatable({ owner = ctx.e2b, config = config, live = {}, terminals = {}, seq = 0,
    policies_env = policies.env or require("policies.env"),
    timeouts = policies.timeouts or require("policies.timeouts") }, SP)
end

M.Handle, M.Term, M.SP = Handle, Term, SP
return M
