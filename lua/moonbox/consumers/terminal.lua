-- moonbox.consumers.terminal — plugin "terminal" (`ctx.terminal`): an interactive shell an
-- agent types into, written only against the subprocess seam (spawnTerminal).
--
--   local t = ctx.terminal:open{ cwd, env, rows, cols }        → session | nil, err
--   t:send(text, { timeoutMs, cancel }) → { output, exitCode, timedOut, interrupted, waitingForInput }
--   t:interrupt() → { output, exitCode };  t:resize(rows, cols);  t:close()
--
-- The session is `bash --noprofile --norc -i` on a PTY. Before a command runs bash prints an
-- OSC 133;C mark (PS0) and after it an OSC 133;D mark with its exit status (PROMPT_COMMAND),
-- each with a nonce only this session knows (neither variable is exported to the commands), so
-- program output cannot fake a command's start or end, and the output is exactly what lies
-- between the two marks (no echo to strip). send() writes the text and a return — one request
-- — and then waits on the terminal's output itself, no polling: it returns at the end mark, or
-- when the output has been silent for silenceMs and the foreground program is waiting for
-- input (one inspectForeground: it asked something), or at the timeout. A canceled send
-- interrupts the foreground group with SIGINT and waits for the end mark. close() terminates
-- the whole session.
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"
local ids = require "moonbox.ids"
local mb = require "moonbox"

local M = { name = "terminal", provides = "terminal", inject = { "subprocess" } }

local function positive(v) if v ~= v or v <= 0 or v == math.huge then return "must be a positive finite number" end end
M.schema = {
  cwd = { type = "string" },
  shell = { type = "string", default = "/bin/bash" },
  rows = { type = "number", default = 40, check = positive },
  cols = { type = "number", default = 160, check = positive },
  sendTimeoutMs = { type = "number", default = 30000, check = positive },
  silenceMs = { type = "number", default = 1500, check = positive },
  startTimeoutMs = { type = "number", default = 30000, check = positive },
  graceMs = { type = "number", default = 3000, check = positive },
  maxOutputBytes = { type = "number", default = 1024 * 1024, check = positive },
}


local Terminal = {}
Terminal.__index = Terminal
local Session = {}
Session.__index = Session
M.Terminal, M.Session = Terminal, Session

-- The option fields of open, send and interrupt (strict: anything else raises).
local OPTIONS = { open = { "cwd", "env", "rows", "cols" }, send = { "timeoutMs", "cancel" }, interrupt = { "timeoutMs" } }
M.OPTIONS = OPTIONS

-- What a terminal adds to output that is not the program's: CR before LF, bracketed-paste
-- toggles, title sequences.
local function clean(s)
  s = s:gsub("\r\n", "\n"):gsub("\27%[%?2004[hl]", ""):gsub("\27%]0;[^\7]*\7", "")
  return (s:gsub("\r", ""))
end

function Terminal:open(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("terminal:open: opts must be a table", 2) end
  fields.only(opts, OPTIONS.open, "terminal:open", 2)
  local m = mb
  local nonce = ids.hex(8)
  local env = { TERM = "dumb", PAGER = "cat", GIT_PAGER = "cat", PS1 = "", PS2 = "", HISTFILE = "/dev/null",
    BASH_SILENCE_DEPRECATION_WARNING = "1", INPUTRC = "/dev/null",
    PS0 = ("\\e]133;C;%s\\a"):format(nonce),
    PROMPT_COMMAND = ('printf "\\033]133;D;%%s;%s\\007" "$?"'):format(nonce) }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local t, err = self.sp:spawnTerminal{ argv = { self.config.shell, "--noprofile", "--norc", "-i" },
    cwd = opts.cwd or self.config.cwd, env = env, rows = opts.rows or math.tointeger(self.config.rows),
    cols = opts.cols or math.tointeger(self.config.cols), graceMs = self.config.graceMs,
    detached = true }   -- the session belongs to this consumer (close, dispose), not to the task
  if not t then return nil, err end
  local s = setmetatable({ owner = self, t = t, nonce = nonce, buf = "", changed = m.event(),
    ended = false }, Session)
  s.reader = m.spawn(function() s:_read() end)
  self.sessions[s] = true
  -- the first mark comes before the first prompt; then hide the nonce from the commands
  local first, ferr = s:_until_mark(self.config.startTimeoutMs)
  if not first then s:close() return nil, ferr end
  local r, rerr = s:send("export -n PROMPT_COMMAND PS0; bind 'set enable-bracketed-paste off' 2>/dev/null")
  if not r then s:close() return nil, rerr end
  return s
end

-- The output pump: everything the terminal prints lands in buf (bounded), waking waiters.
function Session:_read()
  local max = self.owner.config.maxOutputBytes
  while true do
    local c, err = self.t:read()
    if not c then self.ended, self.read_error = true, err break end
    self.buf = self.buf .. c
    if #self.buf > max then self.buf = self.buf:sub(-max) self.cut = true end
    self:_changed()
  end
  self:_changed()
end

function Session:_changed()
  local ev = self.changed
  self.changed = mb.event()
  ev:set(true)
end

-- Waits for the next mark in buf. → status, output before it | nil, err | false, "silent"
function Session:_until_mark(timeout_ms, silence_ms)
  local m = mb
  local deadline = m.now() + timeout_ms
  local pattern = "\27%]133;D;(%d+);" .. self.nonce .. "\7"
  while true do
    local a, b, status = self.buf:find(pattern)
    if a then
      local out = self.buf:sub(1, a - 1)
      self.buf = self.buf:sub(b + 1)
      -- the command's own output starts after its start mark (the echo of the line precedes it)
      local _, c = out:find("\27]133;C;" .. self.nonce .. "\7", 1, true)
      if c then out = out:sub(c + 1) end
      return tonumber(status), out
    end
    if self.ended then return nil, self.read_error or errors.new("TERMINAL_EXITED", "the shell has exited") end
    local left = deadline - m.now()
    if left <= 0 then return nil, errors.new("MB_TIMEOUT", "no prompt within " .. timeout_ms .. " ms") end
    local ok, err = self.changed:wait(silence_ms and math.min(left, silence_ms) or left)
    if ok == nil and err.code == "MB_CANCELED" then return nil, err end
    if ok == nil and silence_ms and err.code == "MB_TIMEOUT" and m.now() < deadline then return false, "silent" end
  end
end

-- The output of a command: what follows its start mark, without terminal noise.
function Session:_output(raw)
  local _, c = raw:find("\27]133;C;" .. self.nonce .. "\7", 1, true)
  if c then raw = raw:sub(c + 1) end
  return clean(raw)
end

function Session:send(line, opts)
  opts = opts or {}
  fields.only(opts, OPTIONS.send, "terminal:send", 2)
  if type(line) ~= "string" then error("terminal:send: text must be a string", 2) end
  if line:find("[\r\n]") then error("terminal:send: one command line (no CR or LF)", 2) end
  if self.closed then return nil, errors.new("TERMINAL_CLOSED", "the session is closed") end
  local m = mb
  local timeout = opts.timeoutMs or self.owner.config.sendTimeoutMs
  local silence = self.owner.config.silenceMs
  local ok, werr = self.t:write(line .. "\r")
  if not ok then return nil, werr end
  local interrupted = false
  local cancel = opts.cancel and m.spawn(function()
    if opts.cancel:wait() then interrupted = true self.t:signalForeground("SIGINT") end
  end)
  local deadline = m.now() + timeout      -- one deadline: each silent spell must not restart it
  while true do
    local status, out = self:_until_mark(math.max(0, deadline - m.now()), silence)
    if status == false then
      -- silent and no end mark: whoever holds the terminal — a program, `read`, or bash itself
      -- on an unfinished line — asking for input ends the wait (one inspect)
      local fg = self.t:inspectForeground()
      if fg and fg.inputWaiting then
        if cancel then cancel:cancel() end
        local o = self:_output(self.buf)
        self.buf = ""                      -- the next send's output starts after this
        return { output = o, waitingForInput = true, interrupted = interrupted }
      end
    elseif status == nil then
      if cancel then cancel:cancel() end
      if out.code == "MB_CANCELED" and not interrupted then
        -- the calling task was canceled: interrupt the command and take its mark
        interrupted = true
        self.t:signalForeground("SIGINT")
        local st, o2 = self:_until_mark(timeout)
        if st then return { output = self:_output(o2), exitCode = st, interrupted = true } end
      end
      if out.code == "MB_TIMEOUT" then
        local o = self:_output(self.buf)
        self.buf = ""
        return { output = o, timedOut = true, interrupted = interrupted }
      end
      return nil, out
    else
      if cancel then cancel:cancel() end
      return { output = self:_output(out), exitCode = status, interrupted = interrupted }
    end
  end
end

-- SIGINT to the foreground group (a command left running by a timed-out send), then its end
-- mark. → { output, exitCode } | nil, err
function Session:interrupt(opts)
  opts = opts or {}
  fields.only(opts, OPTIONS.interrupt, "terminal:interrupt", 2)
  if self.closed then return nil, errors.new("TERMINAL_CLOSED", "the session is closed") end
  local ok, err = self.t:signalForeground("SIGINT")
  if not ok then return nil, err end
  local st, out = self:_until_mark(opts.timeoutMs or self.owner.config.sendTimeoutMs)
  if not st then return nil, out end
  return { output = self:_output(out), exitCode = st, interrupted = true }
end

function Session:resize(rows, cols) return self.t:resize(rows, cols) end

function Session:close()
  if self.closed then return true end
  self.closed = true
  self.owner.sessions[self] = nil
  return self.t:terminate()
end

function Terminal:dispose()
  local first
  for s in pairs(self.sessions) do
    local ok, err = s:close()
    if not ok then first = first or err end
  end
  if first then return nil, first end
  return true
end

function M.new(ctx, config)
  assert(ctx.subprocess, "terminal: a subprocess provider must load first")
  return setmetatable({ sp = ctx.subprocess, config = config, sessions = {} }, Terminal)
end

return M
