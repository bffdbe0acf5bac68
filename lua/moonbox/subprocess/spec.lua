-- moonbox.subprocess.spec — what every subprocess provider checks and shares: the spawn and
-- terminal specs (bad input raises before anything is launched, naming the field and what was
-- expected), signal names, cancel tokens, outcomes.
local fields = require "moonbox.fields"
local sched = require "moonbox.sched"

local M = {}

-- Byte counts must be exact in a double: at most 2^53.
local MAX_BYTES = 2 ^ 53

M.SIGNALS = { [1] = "SIGHUP", [2] = "SIGINT", [3] = "SIGQUIT", [4] = "SIGILL", [5] = "SIGTRAP",
  [6] = "SIGABRT", [7] = "SIGBUS", [8] = "SIGFPE", [9] = "SIGKILL", [10] = "SIGUSR1", [11] = "SIGSEGV",
  [12] = "SIGUSR2", [13] = "SIGPIPE", [14] = "SIGALRM", [15] = "SIGTERM", [16] = "SIGSTKFLT",
  [17] = "SIGCHLD", [18] = "SIGCONT", [19] = "SIGSTOP", [20] = "SIGTSTP", [21] = "SIGTTIN",
  [22] = "SIGTTOU", [23] = "SIGURG", [24] = "SIGXCPU", [25] = "SIGXFSZ", [26] = "SIGVTALRM",
  [27] = "SIGPROF", [28] = "SIGWINCH", [29] = "SIGIO", [30] = "SIGPWR", [31] = "SIGSYS" }
function M.signal_name(n) return M.SIGNALS[n] or ("SIG" .. tostring(n)) end

-- The signals a terminal's foreground group may receive.
M.TERMINAL_SIGNALS = { SIGINT = true, SIGTERM = true, SIGKILL = true, SIGTSTP = true, SIGHUP = true }

-- Whole milliseconds for a command line (a fractional grace rounds up).
function M.whole_ms(ms) return math.tointeger(ms) or math.ceil(ms) end

local function bad(level, fmt, ...) error(fmt:format(...), level + 1) end

-- Unknown fields are errors (a typo must not be ignored): the first one, with the nearest name.
local function only(t, list, what, level) fields.only(t, list, what, level + 1) end
local SPAWN_FIELDS = { "argv", "cwd", "stdio", "env", "graceMs", "cancel", "detached" }
local STDIO_FIELDS = { "stdin", "stdout", "stderr" }
local TERMINAL_FIELDS = { "argv", "cwd", "env", "rows", "cols", "graceMs", "cancel", "detached" }
local OUTPUT_FIELDS = { "maxBytes", "spill" }      -- a collect-mode stdout / stderr
M.SPAWN_FIELDS, M.STDIO_FIELDS, M.TERMINAL_FIELDS, M.OUTPUT_FIELDS = SPAWN_FIELDS, STDIO_FIELDS, TERMINAL_FIELDS, OUTPUT_FIELDS

local function byte_count(v, field, level)
  if type(v) ~= "number" or v ~= v or v < 0 or v > MAX_BYTES or v ~= math.floor(v) then
    bad(level + 1, "%s must be a whole number of bytes from 0 to 2^53, got %s", field, tostring(v))
  end
  return math.tointeger(v)
end

-- stdout/stderr: 'pipe' | 'inherit' | { maxBytes = n [, spill = { maxBytes = n }] }
local function check_output(mode, name, level)
  if mode == "pipe" or mode == "inherit" then return end
  if type(mode) ~= "table" then
    bad(level + 1, "stdio.%s: expected 'pipe', 'inherit' or { maxBytes = n [, spill = { maxBytes = n }] }, got %s",
      name, type(mode) == "string" and ("%q"):format(mode) or type(mode))
  end
  byte_count(mode.maxBytes, "stdio." .. name .. ".maxBytes", level + 1)
  if mode.spill ~= nil then
    if type(mode.spill) ~= "table" then bad(level + 1, "stdio.%s.spill must be { maxBytes = n }", name) end
    byte_count(mode.spill.maxBytes, "stdio." .. name .. ".spill.maxBytes", level + 1)
  end
  for k in pairs(mode) do
    local known = false
    for _, f in ipairs(OUTPUT_FIELDS) do if k == f then known = true end end
    if not known then bad(level + 1, "stdio.%s: unknown field %s", name, tostring(k)) end
  end
end

local function check_argv(argv, what, level)
  if type(argv) ~= "table" or type(argv[1]) ~= "string" or argv[1] == "" then
    bad(level + 1, "%s: argv must be a list whose argv[1] is a non-empty program name", what)
  end
  for i, a in ipairs(argv) do
    if type(a) ~= "string" or a:find("\0", 1, true) then
      bad(level + 1, "%s: argv[%d] must be a string without NUL", what, i)
    end
  end
end

-- A cancel token is an mb.event() (anything with :wait and is_set).
function M.check_cancel(token, what, level)
  if token == nil then return end
  if type(token) ~= "table" or type(token.wait) ~= "function" then
    bad((level or 2) + 1, "%s: cancel must be an mb.event()", what)
  end
end

-- spawn{ argv, cwd, stdio = { stdin, stdout, stderr }, graceMs, env, cancel, detached }: raises on
-- bad input. Unless detached, the command is terminated when the task that started it is
-- canceled or fails (sched.on_abandon).
function M.check_spawn(spec, timeouts, level)
  level = (level or 2) + 1
  if type(spec) ~= "table" then bad(level, "spawn: spec must be a table") end
  only(spec, SPAWN_FIELDS, "spawn", level)
  check_argv(spec.argv, "spawn", level)
  if type(spec.cwd) ~= "string" or spec.cwd == "" then bad(level, "spawn: cwd must be a non-empty path") end
  timeouts.check_grace(spec.graceMs, "spawn: graceMs", level)
  local stdio = spec.stdio
  if type(stdio) ~= "table" then bad(level, "spawn: stdio = { stdin =, stdout =, stderr = } is required") end
  only(stdio, STDIO_FIELDS, "spawn: stdio", level)
  local sin = stdio.stdin
  if not (sin == "ignore" or sin == "pipe" or (type(sin) == "table" and type(sin.data) == "string")) then
    bad(level, "stdio.stdin: expected 'ignore', 'pipe' or { data = string }")
  end
  check_output(stdio.stdout, "stdout", level)
  check_output(stdio.stderr, "stderr", level)
  if spec.env ~= nil and type(spec.env) ~= "table" then bad(level, "spawn: env must be a table of name = string|false") end
  if spec.detached ~= nil and type(spec.detached) ~= "boolean" then bad(level, "spawn: detached must be a boolean") end
  M.check_cancel(spec.cancel, "spawn", level)
end

-- spawnTerminal{ argv, cwd, env, rows, cols, graceMs, cancel }: raises on bad input.
function M.check_terminal(spec, timeouts, level)
  level = (level or 2) + 1
  if type(spec) ~= "table" then bad(level, "spawnTerminal: spec must be a table") end
  only(spec, TERMINAL_FIELDS, "spawnTerminal", level)
  check_argv(spec.argv, "spawnTerminal", level)
  if spec.cwd ~= nil and (type(spec.cwd) ~= "string" or spec.cwd == "") then
    bad(level, "spawnTerminal: cwd must be a non-empty path")
  end
  for _, f in ipairs({ "rows", "cols" }) do
    local v = spec[f]
    if v ~= nil and (math.type(v) ~= "integer" or v < 1 or v > 65535) then
      bad(level, "spawnTerminal: %s must be an integer from 1 to 65535", f)
    end
  end
  if spec.graceMs ~= nil then timeouts.check_grace(spec.graceMs, "spawnTerminal: graceMs", level) end
  if spec.env ~= nil and type(spec.env) ~= "table" then bad(level, "spawnTerminal: env must be a table") end
  if spec.detached ~= nil and type(spec.detached) ~= "boolean" then bad(level, "spawnTerminal: detached must be a boolean") end
  M.check_cancel(spec.cancel, "spawnTerminal", level)
end

-- Watches a cancel token → the watching task (cancel it when done).
function M.watch_cancel(token, fn)
  if token == nil then return nil end
  return sched.spawn(function()
    local a, e = token:wait()
    if a == nil and e ~= nil then return end   -- the watcher itself was canceled
    fn()
  end)
end

-- Go's ProcessState.String() for a signalled process ("signal: killed") → name.
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

return M
