-- moonbox.consumers.bash — plugin "bash" (`ctx.bash`): a bash tool for agents, written only
-- against the subprocess seam, so it runs unchanged on the host providers and in a sandbox.
--
--   ctx.bash:run{ command, cwd, env, stdin, timeoutMs, cancel, stdoutMaxBytes, stderrMaxBytes }
--     → { exitCode, signal, stdout, stderr, truncated, spillPath, timedOut, aborted, timeoutMs }
--   ctx.bash:start{ command, cwd, env, stdin, stdoutMaxBytes, stderrMaxBytes } → job   (a background job)
--   ctx.bash:read(job, cursor) → { delta, stdout, stderr, cursor, lossy, stdoutSpillPath,
--                                  stderrSpillPath, status, exitCode, signal }
--   ctx.bash:kill(job) → true | nil, err;   ctx.bash:list() → { job, ... }
--
-- Every command is `bash -c command` in its own process group (the seam's), with NO_COLOR=1,
-- TERM=dumb, PAGER=cat, GIT_PAGER=cat under the caller's env, and the collected output of each
-- stream bounded (maxOutputBytes of tail, a spill of up to maxSpillBytes holding the whole
-- stream). A foreground run returns when bash itself exits — a `cmd &` it left behind does not
-- hold the call; leftovers end with the service. On timeout (or the caller's cancel token, or
-- the calling task canceled) the whole tree is terminated (TERM, KILL after graceMs) and what
-- it printed is returned. Output is decoded as UTF-8 with one U+FFFD per maximal ill-formed
-- subsequence (text.lossy); a background read never splits a character between two reads.
-- A job is "killed" when kill() or disposal ended it or a signal did, else "completed".
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"
local text = require "moonbox.text"
local mb = require "moonbox"

local M = { name = "bash", provides = "bash", inject = { "subprocess" } }

local function positive(v) if v ~= v or v <= 0 or v == math.huge then return "must be a positive finite number" end end
local function whole(v) if v ~= v or v < 0 or v ~= math.floor(v) or v > 2 ^ 53 then return "must be a whole number of bytes" end end
M.schema = {
  cwd = { type = "string", check = function(v) if v == "" then return "must be a non-empty path" end end },
  timeoutMs = { type = "number", default = 120000, check = positive },
  maxTimeoutMs = { type = "number", default = 600000, check = positive },
  maxOutputBytes = { type = "number", default = 64000, check = whole },
  maxSpillBytes = { type = "number", default = 64 * 1024 * 1024, check = whole },
  graceMs = { type = "number", default = 3000, check = positive },
  shell = { type = "string", default = "bash" },
}

local BASE_ENV = { NO_COLOR = "1", TERM = "dumb", PAGER = "cat", GIT_PAGER = "cat" }

local Bash = {}
Bash.__index = Bash


local function bad(fmt, ...) error(("bash: " .. fmt):format(...), 3) end

local REQUEST_FIELDS = {
  run = { "command", "cwd", "env", "stdin", "timeoutMs", "cancel", "stdoutMaxBytes", "stderrMaxBytes" },
  start = { "command", "cwd", "env", "stdin", "stdoutMaxBytes", "stderrMaxBytes" } }

function Bash:_check(req, what)
  if type(req) ~= "table" then bad("%s expects a table { command = ... }", what) end
  local unknown = fields.unknown(req, REQUEST_FIELDS[what], what)   -- a typo must not be ignored
  if unknown then bad("%s", unknown) end
  if type(req.command) ~= "string" or req.command == "" then bad("%s: command must be a non-empty string", what) end
  if req.cwd ~= nil and (type(req.cwd) ~= "string" or req.cwd == "") then bad("%s: cwd must be a non-empty path", what) end
  if req.env ~= nil and type(req.env) ~= "table" then bad("%s: env must be a table of name = string|false", what) end
  if req.stdin ~= nil and type(req.stdin) ~= "string" then bad("%s: stdin must be a string", what) end
  for _, k in ipairs({ "stdoutMaxBytes", "stderrMaxBytes" }) do   -- a request may raise its tail
    local v = req[k]
    if v ~= nil and (math.type(v) ~= "integer" or v < 0 or v > self.config.maxSpillBytes) then
      bad("%s: %s must be a whole number of bytes from 0 to maxSpillBytes (%d)", what, k, self.config.maxSpillBytes)
    end
  end
  local cwd = req.cwd or self.config.cwd
  if not cwd then bad("%s: no cwd (set it in the request or in the plugin's config)", what) end
  return cwd
end

-- The seam's timeout rule: the requested value (else the default), at most the maximum; a
-- requested value must be positive and finite.
function Bash:_timeout(req)
  local t = req.timeoutMs
  if t == nil then t = self.config.timeoutMs end
  if type(t) ~= "number" or t ~= t or t <= 0 or t == math.huge then
    error("bash: run: timeoutMs must be a positive finite number of milliseconds", 3)
  end
  return math.min(t, self.config.maxTimeoutMs)
end

-- detached: a background job belongs to this consumer (kill, dispose), not to the calling task.
function Bash:_spawn(req, cwd, cancel, detached)
  local env = {}
  for k, v in pairs(BASE_ENV) do env[k] = v end
  for k, v in pairs(req.env or {}) do env[k] = v end
  local function sink(max) return { maxBytes = max or self.config.maxOutputBytes, spill = { maxBytes = self.config.maxSpillBytes } } end
  return self.sp:spawn{ argv = { self.config.shell, "-c", req.command }, cwd = cwd, env = env,
    graceMs = self.config.graceMs, cancel = cancel, detached = detached,
    stdio = { stdin = req.stdin and { data = req.stdin } or "ignore",
      stdout = sink(req.stdoutMaxBytes), stderr = sink(req.stderrMaxBytes) } }
end

local function collected(h, kind)
  local r = h.collected[kind]:readFrom(0)
  return { text = text.lossy(r.text), truncated = r.lossy, spillPath = r.spillPath }
end

-- A foreground command. → result | nil, err (the command could not be started)
function Bash:run(req)
  local cwd = self:_check(req, "run")
  local timeout = self:_timeout(req)
  if req.cancel ~= nil and (type(req.cancel) ~= "table" or type(req.cancel.wait) ~= "function") then
    bad("run: cancel must be an mb.event()")
  end
  local m = mb
  local h, err = self:_spawn(req, cwd)
  if not h then return nil, err end
  local timed_out, aborted = false, false
  local timer = m.spawn(function()
    if m.sleep(timeout) then timed_out = true h:terminate() end
  end)
  local watcher = req.cancel and m.spawn(function()
    if req.cancel:wait() then aborted = not timed_out; if aborted then h:terminate() end end
  end)
  local o, werr = h:exited()
  if not o and werr and werr.code == "MB_CANCELED" then
    -- the calling task was canceled: end the tree, then report what it did
    aborted = true
    h:terminate()
    o, werr = h:exited()
  end
  timer:cancel()
  if watcher then watcher:cancel() end
  if not o then return nil, werr end
  local so, se = collected(h, "stdout"), collected(h, "stderr")
  return { exitCode = o.exitCode, signal = o.signal, stdout = so.text, stderr = se.text,
    truncated = so.truncated or se.truncated, spillPath = so.spillPath, stderrSpillPath = se.spillPath,
    timedOut = timed_out, aborted = aborted and not timed_out, timeoutMs = timeout }
end

---------------------------------------------------------------------------- background jobs
local Job = {}
Job.__index = Job

function Bash:start(req)
  local cwd = self:_check(req, "start")
  local h, err = self:_spawn(req, cwd, nil, true)
  if not h then return nil, err end
  self.seq = self.seq + 1
  local job = setmetatable({ id = self.seq, command = req.command, h = h, status = "running" }, Job)
  self.jobs[job.id] = job
  mb.spawn(function()
    local o, werr = h:exited()
    -- canceled (the service or the run ending): the exit may still be known to the handle
    if not o and errors.is(werr) and werr.code == "MB_CANCELED" then return job:_refresh() end
    job:_finish(o, werr)
  end)
  return job
end

-- A job's end: "killed" when kill() or disposal ended it or a signal did (a `kill -9 $$` too).
function Job:_finish(o, err)
  if self.status ~= "running" then return end
  self.outcome, self.error = o, err
  self.status = (self.killed or (o and o.signal)) and "killed" or "completed"
end

-- What the handle knows, whether or not the task waiting for it has run yet: disposal and
-- kill() must not call a job that already exited "killed".
function Job:_refresh()
  local h = self.h
  if h.exit_fact then self:_finish(h.exit_fact)
  elseif h.settled then self:_finish(h.outcome, h.error) end
end

function Bash:_job(j)
  local job = type(j) == "table" and j or self.jobs[j]
  if not job or getmetatable(job) ~= Job then error("bash: no such job: " .. tostring(j), 3) end
  return job
end

-- New output since `cursor` ({ stdout = offset, stderr = offset }, nil: from the start), never
-- cutting a UTF-8 character: an incomplete one stays for the next read.
-- Once the tree is done nothing more comes: a cut character at the end is decoded (U+FFFD).
local function delta(h, kind, from)
  local r = h.collected[kind]:readFrom(from or 0)
  local keep = h.settled and #r.text or text.complete_prefix(r.text)
  local s = r.text:sub(1, keep)
  return text.lossy(s), r.nextOffset - (#r.text - keep), r.lossy, r.lossy and r.spillPath or nil
end

function Bash:read(j, cursor)
  local job = self:_job(j)
  job:_refresh()
  cursor = cursor or {}
  local out, out_next, out_lossy, out_spill = delta(job.h, "stdout", cursor.stdout)
  local err, err_next, err_lossy, err_spill = delta(job.h, "stderr", cursor.stderr)
  local merged = out
  if err ~= "" then merged = merged .. (merged ~= "" and merged:sub(-1) ~= "\n" and "\n" or "") .. "[stderr]\n" .. err end
  local o = job.outcome or {}
  return { delta = merged, stdout = out, stderr = err, cursor = { stdout = out_next, stderr = err_next },
    lossy = out_lossy or err_lossy, stdoutSpillPath = out_spill, stderrSpillPath = err_spill, status = job.status, exitCode = o.exitCode, signal = o.signal, error = job.error }
end

function Bash:kill(j)
  local job = self:_job(j)
  job:_refresh()
  if job.status ~= "running" then return true end
  job.killed = true
  return job.h:terminate()
end

function Bash:list()
  local out = {}
  for _, job in pairs(self.jobs) do job:_refresh() out[#out + 1] = job end
  table.sort(out, function(a, b) return a.id < b.id end)
  return out
end

function Bash:dispose()
  for _, job in pairs(self.jobs) do
    job:_refresh()
    if job.status == "running" then job.killed = true job.h:terminate() end
  end
  return true
end

function M.new(ctx, config)
  assert(ctx.subprocess, "bash: a subprocess provider must load first")
  return setmetatable({ sp = ctx.subprocess, config = config, jobs = {}, seq = 0 }, Bash)
end

M.Bash, M.Job, M.REQUEST_FIELDS = Bash, Job, REQUEST_FIELDS
return M
