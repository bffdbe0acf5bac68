-- moonbox.fs.watch — ctx.fs:watch's watcher (moonbox.fs.service): one long-running
-- `mbwrap watch [-r] DIR` in the world (inotify; the same program, records and semantics in a
-- sandbox and on the host), its records parsed into a bounded queue by a task of its own.
--
-- Records (core/wrapper/watch.c): "ready\n", "ev TYPE LEN NAME\n", "overflow\n", "gone\n",
-- "err CODE DETAIL\n". Events follow E2B's watchDir (fsnotify): create (made, or moved in),
-- write, remove, rename (moved away: the old name; the new name is a create), chmod.
--
-- The queue holds at most maxEvents events; what comes while it is full is dropped and counted:
-- one { type = "overflow", dropped = n } takes the place of the dropped run, in order (after the
-- events queued before it, before those queued after it). The kernel's own queue overflowing
-- (the reader fell far behind) sets kernel = true on that record (its count is unknown).
-- Memory: maxEvents events, as many overflow records at most plus one, one record's bytes.
local errors = require "moonbox.errors"
local sched = require "moonbox.sched"
local events = require "moonbox.events"
local common = require "moonbox.world.common"

local M = {}

M.MAX_EVENTS_LIMIT = 1 << 20
M.DEFAULT_MAX_EVENTS = 1024
-- The longest record: "ev chmod <len> " + a relative name (below PATH_MAX) + "\n".
M.RECORD_MAX = 4096 + 64

local Watcher = {}
Watcher.__index = Watcher
M.Watcher = Watcher

local TYPES = { create = true, write = true, remove = true, rename = true, chmod = true }
local WORDS = { "ready", "overflow", "gone", "ev", "err" }

-- The next record of buf from pos → record, next pos | nil (incomplete) | false (malformed).
-- record: { kind = "ready"|"overflow"|"gone" } | { kind = "ev", type, name } | { kind = "err", code, detail }
function M.parse_record(buf, pos)
  local word, after = buf:match("^(%a+)()", pos)
  if not word then
    if pos > #buf then return nil end
    return false                             -- every record starts with a word
  end
  if after > #buf then                       -- the word may go on in the next bytes
    for _, w in ipairs(WORDS) do
      if w:sub(1, #word) == word then return nil end
    end
    return false
  end
  if word == "ready" or word == "overflow" or word == "gone" then
    local c = buf:sub(after, after)
    if c == "" then return nil end
    if c ~= "\n" then return false end
    return { kind = word }, after + 1
  elseif word == "ev" then
    local ty, len, p = buf:match("^ (%a+) (%d+) ()", after)
    if not ty then
      -- "ev" + up to " chmod 4096" may still be arriving
      if buf:find("\n", after, true) or #buf - after > 24 then return false end
      return nil
    end
    len = tonumber(len)
    if not TYPES[ty] or len < 1 or len >= M.RECORD_MAX then return false end
    if #buf < p + len then return nil end
    if buf:sub(p + len, p + len) ~= "\n" then return false end
    return { kind = "ev", type = ty, name = buf:sub(p, p + len - 1) }, p + len + 1
  elseif word == "err" then
    local e = buf:find("\n", after, true)
    if not e then return nil end
    local code, detail = buf:sub(after, e - 1):match("^ (%S+) ?(.*)$")
    if not code then return false end
    return { kind = "err", code = code, detail = detail }, e + 1
  end
  return false
end

-- w = { fs, sb, s (the stream), target, recursive, max, timeouts, map_err (the fs service's:
-- a world's error → the seam's), shielded (the fs service's: run without being interrupted) }
function M.new(w)
  w.items, w.head, w.tail, w.count = {}, 1, 0, 0
  w.waiters, w.pending, w.pos = {}, "", 1
  return setmetatable(w, Watcher)
end

local function closed_err() return errors.new("MB_CLOSED", "watcher is closed") end

function Watcher:_push(item)
  self.tail = self.tail + 1
  self.items[self.tail] = item
end

function Watcher:_event(ty, name)
  local last = self.items[self.tail]
  if self.count >= self.max then
    if last and last.type == "overflow" then last.dropped = last.dropped + 1
    else self:_push({ type = "overflow", dropped = 1 }) end
    return
  end
  local base = self.target.displayPath
  self.count = self.count + 1
  self:_push({ type = ty, name = name, path = (base == "/" and "" or base) .. "/" .. name })
end

function Watcher:_kernel_overflow()
  local last = self.items[self.tail]
  if last and last.type == "overflow" then last.kernel = true
  else self:_push({ type = "overflow", dropped = 0, kernel = true }) end
end

-- The watch ended (its error stays: next() returns it once the queue is empty).
function Watcher:_end(err)
  if not self.err then self.err = err end
  sched.wake_all(self.waiters, self, true)
end

function Watcher:_facts()
  while true do
    local f = self.s:next_facts(0)
    if not f then return end
    for _, x in ipairs(f) do
      if x.kind == "start" then self.pid = math.tointeger(x.pid)
      elseif x.kind == "done" or x.kind == "end" then self.exited = true end
    end
  end
end

-- Bytes of the stream → records; the first "ready" sets self.ready. → nil | err (malformed,
-- an err record: the watch is over)
function Watcher:_feed(chunk)
  local buf = self.pending:sub(self.pos) .. chunk
  local pos = 1
  while true do
    local r, np = M.parse_record(buf, pos)
    if r == nil then break end
    if r == false then
      return errors.new("FS_IO_ERROR", "mbwrap watch: malformed output")
    end
    pos = np
    if r.kind == "ev" then
      self:_event(r.type, r.name)
    elseif r.kind == "ready" then
      self.ready = true
    elseif r.kind == "overflow" then
      self:_kernel_overflow()
    elseif r.kind == "gone" then
      self.gone = true
    else
      return self.map_err("watch", self.target.displayPath,
        errors.new("TOOL_" .. r.code, r.detail, { tool_code = r.code }))
    end
  end
  if #buf - pos + 1 > M.RECORD_MAX then
    return errors.new("FS_IO_ERROR", "mbwrap watch: a record over " .. M.RECORD_MAX .. " bytes")
  end
  self.pending, self.pos = buf, pos
  if self.tail >= self.head then sched.wake_all(self.waiters, self, true) end
end

-- How the stream ended → the error next() reports once the queue is drained.
function Watcher:_ended(rerr)
  if self.closed then return closed_err() end
  local facts, ferr = common.finished(self.sb, self.s, self.timeouts.request_ms)
  for _, x in ipairs(facts) do
    if x.kind == "done" or x.kind == "end" then self.exited = true end
  end
  if self.closed then return closed_err() end
  if self.gone then
    return errors.new("FS_NOT_FOUND", ("watched directory %q was removed or moved"):format(self.target.displayPath))
  end
  -- finished's error is explained (the sandbox may be what is gone); a read's is raw
  local err = ferr or (rerr and self.sb:explain(rerr, "watch " .. self.target.displayPath))
  if err then return self.map_err("watch", self.target.displayPath, err) end
  return errors.new("FS_IO_ERROR", ("the watch of %q ended"):format(self.target.displayPath))
end

-- Reads records until "ready" (or the end: its error). → true | nil, err
function Watcher:_start()
  while not self.ready do
    local c, rerr = self.s:read("stdout", self.timeouts.tool_ms)
    if c == nil then
      if rerr and (rerr.code == "MB_TIMEOUT" or rerr.code == "MB_CANCELED") then
        self:close()
        return nil, self.map_err("watch", self.target.displayPath, rerr)
      end
      local err = self.err or self:_ended(rerr)
      self:close()
      return nil, err
    end
    local ferr = self:_feed(c)
    if ferr then self.err = ferr; self:close() return nil, ferr end
  end
  self:_facts()
  return true
end

-- The pump: records into the queue until the stream ends. A stream that broke while the
-- process may still run gets it stopped.
function Watcher:_pump()
  while true do
    local c, rerr = self.s:read("stdout")
    local ferr
    if c == nil then ferr = self:_ended(rerr) else ferr = self:_feed(c) end
    if ferr then
      self:_end(ferr)
      self:_stop()
      return
    end
  end
end

-- → event | nil, err. MB_TIMEOUT when nothing came within timeout_ms (nil: no limit); once the
-- watch ended, its queued events and then its error (MB_CLOSED after close()).
function Watcher:next(timeout_ms)
  sched.check_timeout(timeout_ms, 2)
  local t = sched.need_task("watcher:next", 2)
  while true do
    if self.closed then return nil, closed_err() end
    if self.tail >= self.head then
      local item = self.items[self.head]
      self.items[self.head] = nil
      self.head = self.head + 1
      if item.type ~= "overflow" then self.count = self.count - 1 end
      return item
    end
    if self.err then return nil, self.err end
    local werr = sched.wait_on(self, self.waiters, t, timeout_ms, "fs watch")
    if werr then return nil, werr end
  end
end

-- Untracked: the service's dispose and the owner's abandonment no longer close it.
function Watcher:_release()
  if self.released then return end
  self.released = true
  if self.owner then sched.forget(self.owner, self) end
  self.fs.watchers[self] = nil
end

-- The watch process is TERMed (unless it ended) and gone when this returns; the stream is
-- freed. Once, whoever asks first; the others wait for it (never interrupted by a cancellation).
function Watcher:_stop()
  if self.stopping then
    self.shielded(function() self.stopping:wait() end)
    return
  end
  self.stopping = events.event()
  self:_release()
  self.shielded(function()
    self.s:discard("stdout")                       -- nothing held back behind unread output
    self:_facts()
    if not self.exited and self.pid then
      self.sb:signal_process(self.s, self.pid, "SIGTERM")
      self.s:wait_closed(self.timeouts.request_ms)
    end
  end)
  self.s:close()
  self.stopping:set(true)
end

-- Ends the watch: the watch process is gone when close returns (a stream that broke: the
-- process is signalled by its id in the world). Queued events are dropped; next() then
-- returns MB_CLOSED. Idempotent. → true
function Watcher:close()
  if not self.closed then
    self.closed = true
    self.items, self.head, self.tail, self.count = {}, 1, 0, 0
    sched.wake_all(self.waiters, self, true)
  end
  self:_stop()
  return true
end

return M
