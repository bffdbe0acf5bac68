-- moonbox.workspace.manifest — what workspace sync remembers and what the sandbox reports.
--
-- The base: the tree as both sides had it after the last push (or pull), one record per
-- entry — { t = "f"|"d"|"l", m = mode (& 0777), s = size, h = SHA-256 (files), l = link target,
-- v = the host file's version then (dev:ino:size:mtime_ns:ctime_ns: an unchanged version means
-- an unchanged file, without hashing it) } — plus the sync's settings. Stored as JSON in a
-- state directory, one file per (world, sandbox dir, host dir), written atomically.
--
-- The sandbox's answer: `mbwrap manifest` records (core/wrapper/PROTOCOL.md), parsed as they
-- stream in: entries { t, m, s, h, l } (h = false: the sandbox could not read the file) and the
-- excluded paths (rules matched: not descended, so what is below them is unknown, not gone).
local cjson = require("cjson").new()
local errors = require "moonbox.errors"
local mb = require "moonbox"
local core = require "moonbox.core"
local ids = require "moonbox.ids"

local M = { FORMAT = 1 }

local function fail(code, fmt, ...) return nil, errors.new(code, fmt:format(...)) end

------------------------------------------------------------------------------------------------
-- mbwrap manifest records, incrementally:
--   "<t> <mode> <size> <mtime_s>.<ns> <sha256|-|!> <plen> <path> <llen> <link>\n"
--   "x <d|f> 0 0.000000000 - <plen> <path> 0 \n"          (an excluded entry)

local Parser = {}
Parser.__index = Parser

-- max_entries: more records than this → SYNC_TOO_MANY_FILES (the sandbox's own limit is the
-- same; this one holds even if the sandbox lies).
function M.parser(max_entries)
  return setmetatable({ buf = "", entries = {}, excluded = {}, n = 0, max = max_entries or math.huge }, Parser)
end

function Parser:feed(chunk)
  local buf = self.buf .. chunk
  local pos = 1
  while true do
    local t, mode, size, ms, mns, h, plen, p = buf:match("^(%a) (%S+) (%d+) (%d+)%.(%d+) (%S+) (%d+) ()", pos)
    if not t then
      -- a record's head (up to its path) is under 200 bytes
      if #buf - pos + 1 >= 200 then return fail("SYNC_BAD_MANIFEST", "the sandbox's manifest is malformed") end
      break
    end
    plen = tonumber(plen)
    local path = buf:sub(p, p + plen - 1)
    if #path < plen then break end
    local llen, q = buf:match("^ (%d+) ()", p + plen)
    if not llen then
      if #buf >= p + plen + 24 then return fail("SYNC_BAD_MANIFEST", "the sandbox's manifest is malformed at %q", path) end
      break
    end
    llen = tonumber(llen)
    if #buf < q + llen then break end
    if buf:sub(q + llen, q + llen) ~= "\n" then
      return fail("SYNC_BAD_MANIFEST", "the sandbox's manifest is malformed at %q", path)
    end
    local link = buf:sub(q, q + llen - 1)
    pos = q + llen + 1
    self.n = self.n + 1
    if self.n > self.max then
      return fail("SYNC_TOO_MANY_FILES", "the sandbox's tree has more than maxFiles (%d) entries", self.max)
    end
    if t == "x" then
      self.excluded[path] = mode
    elseif t == "f" or t == "d" or t == "l" then
      local e = { t = t, m = tonumber(mode, 8), s = math.tointeger(tonumber(size)), mt = tonumber(ms), mtn = tonumber(mns) }
      if t == "f" then
        if h == "!" then e.h = false
        elseif h:match("^%x+$") and #h == 64 then e.h = h
        else return fail("SYNC_BAD_MANIFEST", "the sandbox's manifest has no hash for %q", path) end
      elseif t == "l" then
        e.l = link
      end
      if not e.m then return fail("SYNC_BAD_MANIFEST", "the sandbox's manifest is malformed at %q", path) end
      self.entries[path] = e
    else
      return fail("SYNC_BAD_MANIFEST", "the sandbox's manifest has an unknown record kind %q", t)
    end
  end
  self.buf = buf:sub(pos)
  return true
end

function Parser:finish()
  if self.buf ~= "" then return fail("SYNC_BAD_MANIFEST", "the sandbox's manifest ends in the middle of a record") end
  return self.entries, self.excluded
end

------------------------------------------------------------------------------------------------
-- The base on disk.

-- Where records live: config.stateDir, else $XDG_STATE_HOME/moonbox/sync, else
-- ~/.local/state/moonbox/sync, else /tmp/moonbox-sync-<uid-ish>.
function M.state_dir(config, getenv)
  getenv = getenv or os.getenv
  if config and config.stateDir then return config.stateDir end
  local xdg = getenv("XDG_STATE_HOME")
  if xdg and xdg:sub(1, 1) == "/" then return xdg .. "/moonbox/sync" end
  local home = getenv("HOME")
  if home and home:sub(1, 1) == "/" then return home .. "/.local/state/moonbox/sync" end
  return "/tmp/moonbox-sync-" .. (getenv("USER") or "user")
end

function M.key(world_id, sandbox_dir, host_dir)
  return core.sha256_hex(table.concat({ world_id, sandbox_dir, host_dir }, "\0")):sub(1, 32)
end

local made = {}

-- mkdir -p (a host process, once per directory and process).
local function ensure_dir(dir)
  if made[dir] then return true end
  local p, err = mb.proc.spawn{ argv = { "/bin/mkdir", "-p", "-m", "700", "--", dir }, max_buffer = 4096 }
  if not p then return nil, err end
  local code, werr = p:wait(30000)
  local msg = p:read("stderr", 0) or ""
  p:close()
  if code ~= 0 then
    return fail("SYNC_IO_ERROR", "cannot make the state directory %s: %s", dir, werr and tostring(werr) or msg)
  end
  made[dir] = true
  return true
end

-- → base | false (none recorded) | nil, err
function M.load(dir, key)
  local path = dir .. "/" .. key .. ".json"
  local f = io.open(path, "rb")
  if not f then return false end
  local text = f:read("a")
  f:close()
  local ok, v = pcall(cjson.decode, text or "")
  if not ok or type(v) ~= "table" or v.format ~= M.FORMAT or type(v.entries) ~= "table" then
    return fail("SYNC_BAD_STATE", "the sync record %s is unreadable (remove it and push again)", path)
  end
  return v
end

function M.save(dir, key, base)
  local ok, err = ensure_dir(dir)
  if not ok then return nil, err end
  local path = dir .. "/" .. key .. ".json"
  local tmp = ("%s.%s.tmp"):format(path, ids.hex(6))
  local f, ferr = io.open(tmp, "wb")
  if not f then return fail("SYNC_IO_ERROR", "cannot write the sync record %s: %s", tmp, tostring(ferr)) end
  base.format = M.FORMAT
  local wok, werr = f:write(cjson.encode(base))
  local cok = f:close()
  if not wok or not cok then
    os.remove(tmp)
    return fail("SYNC_IO_ERROR", "cannot write the sync record %s: %s", tmp, tostring(werr))
  end
  local rok, rerr = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    return fail("SYNC_IO_ERROR", "cannot write the sync record %s: %s", path, tostring(rerr))
  end
  return true
end

-- A base record from a scan entry (core.sync_root():scan, hashed by its pack).
function M.from_scan(e)
  if e.type == "file" then return { t = "f", m = e.mode, s = e.size, h = e.sha256, v = e.version } end
  if e.type == "directory" then return { t = "d", m = e.mode } end
  return { t = "l", l = e.link, v = e.version }
end

-- Two records describe the same entry (type, mode, content or link target).
function M.same(a, b)
  if a == nil or b == nil then return a == b end
  if a.t ~= b.t then return false end
  if a.t == "l" then return a.l == b.l end
  if a.t == "d" then return a.m == b.m end
  return a.h == b.h and a.m == b.m
end

return M
