-- moonbox.fs.service — the filesystem seam (`ctx.fs`) over an execution world
-- (moonbox.world.common): one implementation for the E2B provider (plugin "fs",
-- moonbox.fs.e2b) and the host provider (plugin "fs-local", moonbox.fs.local). Every question
-- goes to mbwrap inside the world, as the world's user: the same answers, versions and errors
-- on both sides, permissions decided by the world's kernel for that user.
--
-- Targets are { targetKey = canonical path, displayPath = lexical absolute path }. Requests per
-- operation (E2B): resolve 1 (mbwrap realpath), stat/lstat 1 (mbwrap stat), readText/readBytes
-- 1 (mbwrap read: metadata and content), streamText 2 (stat, mbwrap cat), listDir 1 (mbwrap
-- list: entries, cheap metadata, resolved symlinks), writeText 2 (upload to a private staging
-- dir + mbwrap publish, which checks the guard, keeps the mode and returns the new version and
-- the diff basis; a failed or aborted write adds one Remove of the staging dir, a refused guard
-- does not), writeBytes 2 (the same path for any bytes; writeText refuses, with no request,
-- what readText would refuse), editText 3 (mbwrap read, upload, publish --expect; a rejected
-- guard costs 1), remove / mkdir / rename 1 each (mbwrap remove, mkdir, rename: they act on the
-- name displayPath gives, its last component not followed, as rm, mkdir and mv do). The
-- host world passes the content on publish's stdin instead (no upload). Versions are
-- dev:ino:size:mtime_ns:ctime_ns (change on every write). Mutations are serialized per
-- targetKey on the host. Results are tables, operational errors `nil, err` with the seam codes
-- (FS_*; the transport's own E2B_* codes pass through); stat/lstat return `false` for an absent
-- target.
--
-- Cancellation (task:cancel()) aborts a write up to the last check right before publication;
-- the publication itself runs shielded in its own task and is always finished, so a committed
-- write is reported as committed (the cancellation then takes effect at the caller's next
-- yielding call). Reads are bounded by maxReadBytes; streamText is unbounded: it holds one
-- chunk at a time and byte ceilings are the consumer's.
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"
local text = require "moonbox.text"
local ids = require "moonbox.ids"
local paths = require "moonbox.fs.paths"
local locks = require "moonbox.fs.lock"
local cancellation = require "moonbox.cancellation"
local sched = require "moonbox.sched"
local watch = require "moonbox.fs.watch"
local events = require "moonbox.events"
local policy_set = require "moonbox.policies"
local common = require "moonbox.world.common"

local M = {}

-- The configuration both providers take.
M.schema = {
  maxReadBytes = { type = "number", default = 64 * 1024 * 1024,
    check = function(v) if v ~= v or v < 1 or v ~= math.floor(v) then return "must be a positive integer" end end },
  maxListBytes = { type = "number", default = 16 * 1024 * 1024,
    check = function(v) if v ~= v or v < 1 or v ~= math.floor(v) then return "must be a positive integer" end end },
  diffBasisMaxBytes = { type = "number", default = 10 * 1024 * 1024,
    check = function(v) if v ~= v or v < 0 or v ~= math.floor(v) then return "must be a non-negative integer" end end },
}

local FS = {}
FS.__index = FS

-- The option and argument fields each call takes (strict: anything else raises), for the
-- calls below and the reference's spec (docs/reference/fs.md).
local OPTIONS = {
  resolve = { "cwd" },
  lstat = { "cwd" },
  expected = { "kind", "version" },            -- writeText / writeBytes: version with replaceIfVersion only
  edit = { "oldString", "newString", "replaceAll", "old", "new", "replace_all" },
  editExpected = { "version" },
  remove = { { "recursive", "boolean" } },
  mkdir = { { "parents", "boolean" } },
  rename = { { "noReplace", "boolean" } },
  watch = { { "recursive", "boolean" }, { "maxEvents", "number" } },
}
M.OPTIONS = OPTIONS
local EXPECTED_KIND = { "kind" }


local function fs_err(code, message, cause)
  return errors.new(code, message, { cause = cause })
end

-- Transport/tool error → seam error for operation `op` on `path`.
local PASS = {}
for _, c in ipairs(errors.FS) do PASS[c] = true end
local BY_CODE = {
  E2B_NOT_FOUND = "FS_NOT_FOUND", TOOL_ENOENT = "FS_NOT_FOUND",
  E2B_PERMISSION_DENIED = "FS_PERMISSION_DENIED", TOOL_EACCES = "FS_PERMISSION_DENIED",
  TOOL_EPERM = "FS_PERMISSION_DENIED", TOOL_EROFS = "FS_PERMISSION_DENIED",
  TOOL_ENOTDIR = "FS_NOT_DIRECTORY",
  MB_CANCELED = "FS_ABORTED",
  E2B_TOO_LARGE = "FS_TOO_LARGE",
}
-- The connection to the sandbox failed, or the sandbox is gone: not a filesystem condition,
-- said as it is (the E2B_* code of the transport; MB_IO: a pipe to a host helper failed).
M.TRANSPORT_CODES = { "E2B_SANDBOX_GONE", "E2B_CONNECT_FAILED", "E2B_IO", "E2B_TIMEOUT", "E2B_TRUNCATED",
  "E2B_PROTOCOL", "E2B_TLS", "E2B_DNS", "E2B_UNAVAILABLE", "E2B_NOMEM", "E2B_UNAUTHENTICATED", "MB_IO" }
for _, c in ipairs(M.TRANSPORT_CODES) do
  PASS[c] = true
end
local function map_err(op, path, err)
  if type(err) ~= "table" then return fs_err("FS_IO_ERROR", ("cannot %s %q: %s"):format(op, path, tostring(err))) end
  if PASS[err.code] then return err end
  local tool = err.code:match("^TOOL_(FS_.*)$")
  if tool and PASS[tool] then
    return fs_err(tool, ("cannot %s %q: %s"):format(op, path, (err.message:gsub("^mbwrap %w+: ", ""))), err)
  end
  local code = BY_CODE[err.code]
  if code == "FS_ABORTED" then return fs_err(code, op .. " aborted", err) end
  if code then return fs_err(code, ("cannot %s %q: %s"):format(op, path, err.message or err.code), err) end
  return fs_err("FS_IO_ERROR", ("cannot %s %q: %s"):format(op, path, tostring(err)), err)
end
M.map_err = map_err

-- A text-rule error (moonbox.text: FS_NOT_TEXT, …) naming the path.
local function text_err(op, path, err)
  return fs_err(err.code, ("cannot %s %q: %s"):format(op, path, err.message), err)
end

local cancel_requested, rearm, shielded = cancellation.requested, cancellation.rearm, cancellation.shielded

-- shielded() for a call returning `value | nil, err`: → value, err, canceled; a raise becomes
-- E2B_PROTOCOL "<what> raised: …".
local function shielded_call(what, fn)
  local r, canceled = shielded(fn)
  if not r[1] then return nil, errors.new("E2B_PROTOCOL", what .. " raised: " .. tostring(r[2])), canceled end
  return r[2], r[3], canceled
end

M.lexical, M.file_url, M.contains = paths.lexical, paths.file_url, paths.contains

-- mbwrap stat output → info table | false (absent) | nil (malformed)
function M.parse_stat(out)
  if out == "absent\n" then return false end
  local kind, size, mode, version = out:match("^(%a+) (%d+) (%d+) (%S+)\n$")
  if not kind then return nil end
  return { type = kind, size = math.tointeger(tonumber(size)), mode = tonumber(mode, 8), version = "e2b:" .. version }
end

-- mbwrap publish output → { before = string|false|nil, operation, version } | nil
function M.parse_publish(out)
  local pos, res = 1, {}
  local head = out:match("^before%-absent\n", pos)
  if head then pos = pos + #head
  else
    local big = out:match("^before%-too%-large %d+\n")
    if big then pos = pos + #big; res.before_too_large = true
    else
      local n = out:match("^before (%d+)\n")
      if n then
        local start = #("before " .. n .. "\n") + 1
        local len = tonumber(n)
        res.before = out:sub(start, start + len - 1)
        if out:sub(start + len, start + len) ~= "\n" then return nil end
        pos = start + len + 1
      end
    end
  end
  local op, ver = out:match("^ok (%a+) (%S+)\n$", pos)
  if not op then return nil end
  res.operation, res.version = op, "e2b:" .. ver
  return res
end

local function strip_version(v) return (v:gsub("^e2b:", "")) end

------------------------------------------------------------------------------------------------

function FS:_sandbox(op, path)
  local sb, err = self.world()
  if not sb then return nil, map_err(op, path, err) end
  return sb
end

-- A failed envd request: the sandbox may be what is gone (sb:explain), else the seam's code.
local function fail(sb, op, path, err)
  if sb and sb.explain then err = sb:explain(err, op .. " " .. path) end
  return map_err(op, path, err)
end

-- Per-target critical section (host side): callers run fn one at a time per key, FIFO.
function FS:_locked(key, fn)
  local r = table.pack(self.locks:run(key, fn))
  if r[1] == nil and errors.is(r[2], "MB_CANCELED") then return nil, map_err("lock", key, r[2]) end
  return table.unpack(r, 1, r.n)
end

function FS:_stat(sb, path, follow)
  local args = follow and { "stat", "-L", path } or { "stat", path }
  local out, err = sb:tool(args)
  if not out then return nil, err end
  local info = M.parse_stat(out)
  if info == nil then return nil, errors.new("E2B_PROTOCOL", "mbwrap stat: malformed output") end
  return info
end

local function public_info(info, with_symlink)
  local t = info.type
  if t ~= "file" and t ~= "directory" and not (with_symlink and t == "symlink") then t = "other" end
  return { version = info.version, type = t, size = info.size }
end

function FS:resolve(path, opts)
  opts = opts or {}
  fields.only(opts, OPTIONS.resolve, "fs:resolve: opts", 2)
  if type(path) ~= "string" or path:match("^%s*$") then
    return nil, fs_err("FS_NOT_FOUND", "file_path must be a non-empty string")
  end
  if path:find("\0", 1, true) then return nil, fs_err("FS_NOT_FOUND", "file_path must not contain NUL") end
  local sb, err = self:_sandbox("resolve", path)
  if not sb then return nil, err end
  local cwd = opts.cwd or sb.cwd
  local display = paths.lexical(path, cwd)
  local out, terr = sb:tool({ "realpath", path, cwd })
  if not out then
    if terr.code == "TOOL_ENOTDIR" then
      return nil, fs_err("FS_NOT_FOUND", ("cannot resolve %q: a parent is not a directory"):format(display), terr)
    end
    return nil, map_err("resolve", display, terr)
  end
  if out:sub(1, 1) ~= "/" or out:find("\0", 1, true) or not text.utf8_valid(out) then
    return nil, fs_err("FS_IO_ERROR", "canonical path transport returned an invalid path")
  end
  return { targetKey = out, displayPath = display }
end

function FS:processPath(target) return paths.check_target(target, "fs:processPath").targetKey end
function FS:fileUrl(target) return paths.file_url(paths.check_target(target, "fs:fileUrl").targetKey) end
function FS:contains(parent, child)
  paths.check_target(parent, "fs:contains (parent)")
  paths.check_target(child, "fs:contains (child)")
  return paths.contains(parent.targetKey, child.targetKey)
end

function FS:stat(target)
  paths.check_target(target, "fs:stat")
  local sb, err = self:_sandbox("stat", target.displayPath)
  if not sb then return nil, err end
  local info, serr = self:_stat(sb, target.targetKey, true)
  if info == nil then return nil, map_err("stat", target.displayPath, serr) end
  if info == false then return false end
  return public_info(info)
end

function FS:lstat(path, opts)
  opts = opts or {}
  fields.only(opts, OPTIONS.lstat, "fs:lstat: opts", 2)
  if type(path) ~= "string" or path == "" then return nil, fs_err("FS_NOT_FOUND", "file_path must be a non-empty string") end
  local sb, err = self:_sandbox("lstat", path)
  if not sb then return nil, err end
  local display = paths.lexical(path, opts.cwd or sb.cwd)
  local info, serr = self:_stat(sb, display, false)
  if info == nil then return nil, map_err("lstat", display, serr) end
  if info == false then return false end
  return public_info(info, true)
end

-- mbwrap read of at most max bytes → info, content | nil, err (absent: FS_NOT_FOUND, not a
-- regular file: FS_NOT_REGULAR_FILE, larger than max: FS_TOO_LARGE)
function FS:_read(sb, target, max, op)
  local out, err = sb:tool({ "read", target.targetKey, tostring(math.tointeger(max)) }, { max_bytes = max + 4096 })
  if not out then return nil, map_err(op, target.displayPath, err) end
  local info, content = M.parse_read(out)
  if info == nil then return nil, fs_err("FS_IO_ERROR", "mbwrap read: malformed output") end
  if info == false then return nil, fs_err("FS_NOT_FOUND", ("cannot %s %q: no such file"):format(op, target.displayPath)) end
  if info.type ~= "file" then
    return nil, fs_err("FS_NOT_REGULAR_FILE", ("cannot %s %q: not a regular file"):format(op, target.displayPath))
  end
  if content == nil then
    return nil, fs_err("FS_TOO_LARGE", ("%q is %d bytes, over the %d byte limit"):format(target.displayPath, info.size, max),
      { size = info.size, size_limit = max })
  end
  return info, content
end

function FS:readBytes(target, maxBytes)
  paths.check_target(target, "fs:readBytes")
  if type(maxBytes) ~= "number" or maxBytes < 0 or maxBytes ~= math.floor(maxBytes) then
    error("readBytes: maxBytes must be a non-negative integer", 2)
  end
  local sb, err = self:_sandbox("read", target.displayPath)
  if not sb then return nil, err end
  local info, content = self:_read(sb, target, maxBytes, "read")
  if not info then return nil, content end
  return content
end

function FS:readText(target)
  paths.check_target(target, "fs:readText")
  local body, err = self:readBytes(target, self.config.maxReadBytes)
  if not body then return nil, err end
  local terr = text.check_text(body, text.NUL_SAMPLE)
  if terr then return nil, text_err("read", target.displayPath, terr) end
  return body
end

-- stat that must find a regular file → info | nil, err
function FS:_require_regular(sb, target, op)
  local info, err = self:_stat(sb, target.targetKey, true)
  if info == nil then return nil, map_err(op, target.displayPath, err) end
  if info == false then return nil, fs_err("FS_NOT_FOUND", ("cannot %s %q: no such file"):format(op, target.displayPath)) end
  if info.type ~= "file" then
    return nil, fs_err("FS_NOT_REGULAR_FILE", ("cannot %s %q: not a regular file"):format(op, target.displayPath))
  end
  return info
end

-- → iterator object { next = fn() → chunk | nil (end) | nil, err, close = fn() } | nil, err
-- UTF-8 is carried across chunk boundaries; a NUL in the first 8192 bytes fails. No byte
-- ceiling (the seam leaves that to consumers): one transport chunk is held at a time.
function FS:streamText(target)
  paths.check_target(target, "fs:streamText")
  local sb, err = self:_sandbox("read", target.displayPath)
  if not sb then return nil, err end
  local info, ierr = self:_require_regular(sb, target, "read")
  if not info then return nil, ierr end
  local s, serr = sb:tool_stream({ "cat", target.targetKey }, { stdout = "pipe", stderr = { tail = 4096 } })
  if not s then return nil, map_err("read", target.displayPath, serr) end
  local dec, finished = text.decoder(text.NUL_SAMPLE), false
  -- cat's failure is one "err CODE detail" line in its stderr frames, then exit status 1
  local function outcome()
    local facts, ferr = common.finished(sb, s, self.timeouts.request_ms)
    if ferr then return map_err("read", target.displayPath, ferr) end
    for _, f in ipairs(facts) do
      if f.kind == "exit" and f.value ~= 0 then
        local line = s:read_from("stderr", 0)
        local code, detail = line:match("^err (%S+) ?([^\n]*)")
        return map_err("read", target.displayPath,
          errors.new("TOOL_" .. (code or "FAILED"), detail or line, { tool_code = code }))
      end
    end
  end
  local it = {}
  function it.next()
    while not finished do
      local c, rerr = s:read("stdout", self.timeouts.stream_idle_ms)
      if c == nil then
        finished = true
        if rerr then s:close() return nil, map_err("read", target.displayPath, rerr) end
        local oerr = outcome()
        if oerr then return nil, oerr end
        local ok, ferr = dec:finish()
        if not ok then return nil, text_err("read", target.displayPath, ferr) end
        return nil
      end
      local t, terr = dec:push(c)
      if not t then finished = true; s:close() return nil, text_err("read", target.displayPath, terr) end
      if t ~= "" then return t end
    end
    return nil
  end
  function it.close() finished = true; s:close() end
  return it
end

-- mbwrap list output → entries { kind, size, version, name, key } | nil (malformed)
function M.parse_list(out)
  local entries, pos = {}, 1
  while pos <= #out do
    local kind, size, ver, nlen, p2 = out:match("^(%a+) (%d+) (%S+) (%d+) ()", pos)
    if not kind then return nil end
    nlen = tonumber(nlen)
    local name = out:sub(p2, p2 + nlen - 1)
    local klen, p3 = out:match("^ (%d+) ()", p2 + nlen)
    if not klen then return nil end
    klen = tonumber(klen)
    local key = out:sub(p3, p3 + klen - 1)
    if #name ~= nlen or #key ~= klen or out:sub(p3 + klen, p3 + klen) ~= "\n" then return nil end
    entries[#entries + 1] = { kind = kind, size = math.tointeger(tonumber(size)), version = "e2b:" .. ver, name = name, key = key }
    pos = p3 + klen + 1
  end
  return entries
end

function FS:listDir(target)
  paths.check_target(target, "fs:listDir")
  local sb, err = self:_sandbox("list", target.displayPath)
  if not sb then return nil, err end
  local out, lerr = sb:tool({ "list", target.targetKey }, { max_bytes = self.config.maxListBytes })
  if not out then
    if lerr.tool_code == "ENOENT" then
      return nil, fs_err("FS_NOT_FOUND", ("cannot list %q: no such directory"):format(target.displayPath), lerr)
    end
    return nil, map_err("list", target.displayPath, lerr)
  end
  local entries = M.parse_list(out)
  if not entries then return nil, fs_err("FS_IO_ERROR", "mbwrap list: malformed output") end
  local dbase = target.displayPath == "/" and "" or target.displayPath
  local result = {}
  for _, e in ipairs(entries) do
    local t = (e.kind == "file" or e.kind == "directory") and e.kind or "other"
    result[#result + 1] = { name = e.name, type = t, target = { targetKey = e.key, displayPath = dbase .. "/" .. e.name },
      version = t ~= "other" and e.version or nil, size = t == "file" and e.size or nil }
  end
  table.sort(result, function(a, b) return a.name < b.name end)
  return result
end

-- Staging: a private directory next to the target (same filesystem, so publish is a rename or
-- a link). mbwrap publish removes it when it can; it cannot where the user may not write the
-- target's directory (envd's uploads may create it there all the same), and an aborted upload
-- never reaches publish, so every failure and abort path also removes it through envd (which
-- may remove anywhere): one extra request, never on the success path.
function FS:_staging(key)
  local dir = key:match("^(.*)/[^/]*$")
  if dir == "" then dir = "/" end
  local base = dir == "/" and "" or dir
  return base .. "/.moonbox-" .. ids.hex(8) .. ".tmp/content"
end

-- Removes a staging directory, shielded from cancellation (best effort: a failure to clean up
-- never hides the operation's own error).
local function remove_staging(sb, dir)
  shielded(function() return sb:unstage(dir) end)
end

function FS:_publish(sb, target, content, args, op)
  op = op or "write"
  local staging = self:_staging(target.targetKey)
  local sdir = staging:match("^(.*)/content$")
  -- The upload is shielded too: an interrupted upload may still be completed by the server
  -- after a Remove sent at once, which would leave the staging dir behind.
  local up, uerr, ucanceled = shielded_call("upload", function() return sb:stage(staging, content) end)
  if not up then
    remove_staging(sb, sdir)
    if ucanceled then return nil, fs_err("FS_ABORTED", op .. " aborted") end
    return nil, fail(sb, op, target.displayPath, uerr)
  end
  -- The last abort check: nothing after this point can turn a committed write into "aborted".
  if ucanceled or cancel_requested() then
    remove_staging(sb, sdir)
    return nil, fs_err("FS_ABORTED", op .. " aborted")
  end
  local cmd = { "publish" }
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  cmd[#cmd + 1] = staging
  cmd[#cmd + 1] = target.targetKey
  -- the answer carries the diff basis (up to diffBasisMaxBytes)
  local max = math.tointeger(self.config.diffBasisMaxBytes) + 4096
  local out, perr, canceled = shielded_call("mbwrap publish", function() return sb:publish(cmd, content, max) end)
  if not out then
    -- a guard that refused the write ran after mbwrap removed the staging (a stale write costs
    -- 2 requests); other failures may leave it where the user cannot remove it: envd does
    local guard = errors.is(perr) and (perr.code == "TOOL_FS_STALE_VERSION" or perr.code == "TOOL_FS_NOT_OBSERVED")
    if not guard then remove_staging(sb, sdir) end
    rearm(canceled)
    return nil, map_err(op, target.displayPath, perr)
  end
  rearm(canceled)
  local res = M.parse_publish(out)
  if not res then return nil, fs_err("FS_IO_ERROR", "mbwrap publish: malformed output") end
  return res
end

local function diff_basis(res)
  if type(res.before) ~= "string" then return nil end
  if text.check_text(res.before) then return nil end           -- binary or not UTF-8: no basis
  return text.normalize_lf(res.before)
end

-- expected: nil (unconditional), { kind = "createIfAbsent" } or { kind = "replaceIfVersion", version = v }
-- LF-normalized text without a copy when there is no CR to remove (a 200 MB write must not
-- cost another 200 MB for `after`).
local function lf(s)
  if not s:find("\r", 1, true) then return s end
  return text.normalize_lf(s)
end

-- expected (writeText, writeBytes) → publish's guard arguments; a malformed one raises at the
-- caller of `what` (level: as error() counts, from the public function).
local function guard_args(expected, what, level)
  local args = {}
  if expected == nil or expected == false then return args end   -- unconditional
  if type(expected) ~= "table" then
    error(("%s: expected must be a table or nil, got %s"):format(what, type(expected)), level + 1)
  end
  fields.only(expected, expected.kind == "replaceIfVersion" and OPTIONS.expected or EXPECTED_KIND, what .. ": expected", level + 1)
  if expected.kind == "createIfAbsent" then args[#args + 1] = "--create-only"
  elseif expected.kind == "replaceIfVersion" then
    if type(expected.version) ~= "string" then error(what .. ": replaceIfVersion needs a version", level + 1) end
    args[#args + 1] = "--expect"; args[#args + 1] = strip_version(expected.version)
  else error(what .. ": unknown intent " .. tostring(expected.kind), level + 1) end
  return args
end

-- What readText would refuse (text.check_text with its NUL sample: a NUL byte within the first
-- NUL_SAMPLE bytes, invalid UTF-8) → FS_NOT_TEXT naming the path and the byte, or nil.
local function refuse_non_text(path, content)
  local terr = text.check_text(content, text.NUL_SAMPLE)
  if not terr then return nil end
  local why
  if text.has_nul(content, text.NUL_SAMPLE) then
    why = ("a NUL byte at byte %d"):format(content:find("\0", 1, true))
  else
    local _, at = text.utf8_valid(content)
    why = ("invalid UTF-8 at byte %d"):format(at)
  end
  return fs_err("FS_NOT_TEXT", ("cannot write %q: not text (%s): readText would refuse it; writeBytes writes any bytes")
    :format(path, why), terr)
end

function FS:writeText(target, content, expected)
  paths.check_target(target, "fs:writeText")
  if type(content) ~= "string" then error("writeText: content must be a string", 2) end
  local args = guard_args(expected, "writeText", 2)
  local nerr = refuse_non_text(target.displayPath, content)
  if nerr then return nil, nerr end
  local sb, err = self:_sandbox("write", target.displayPath)
  if not sb then return nil, err end
  args[#args + 1] = "--before"; args[#args + 1] = tostring(math.tointeger(self.config.diffBasisMaxBytes))
  return self:_locked(target.targetKey, function()
    local res, perr = self:_publish(sb, target, content, args)
    if not res then return nil, perr end
    return { operation = res.operation, version = res.version,
      before = res.operation == "update" and diff_basis(res) or nil, after = lf(content) }
  end)
end

-- Any bytes (NULs, invalid UTF-8), published as writeText publishes: staged, then one atomic
-- rename (link for createIfAbsent), the same guards, mode rules, lock and cancellation.
-- → { operation = "create"|"update", version } | nil, err
function FS:writeBytes(target, content, expected)
  paths.check_target(target, "fs:writeBytes")
  if type(content) ~= "string" then error("writeBytes: content must be a string", 2) end
  local args = guard_args(expected, "writeBytes", 2)
  local sb, err = self:_sandbox("write", target.displayPath)
  if not sb then return nil, err end
  return self:_locked(target.targetKey, function()
    local res, perr = self:_publish(sb, target, content, args)
    if not res then return nil, perr end
    return { operation = res.operation, version = res.version }
  end)
end

-- Strict options: unknown fields name the nearest valid one, a wrong type names the field and
-- what it takes. spec: { { name, lua type }, ... }. Raises at `level` (from the public function).
local function check_opts(opts, spec, what, level)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(("%s must be a table or nil, got %s"):format(what, type(opts)), level + 1) end
  local names = {}
  for i, f in ipairs(spec) do names[i] = f[1] end
  fields.only(opts, names, what, level + 1)
  for _, f in ipairs(spec) do
    local v = opts[f[1]]
    if v ~= nil and type(v) ~= f[2] then
      error(("%s: %s must be a %s, got %s"):format(what, f[1], f[2], type(v)), level + 1)
    end
  end
  return opts
end

-- remove, mkdir, rename: one mbwrap tool that changes names. The last abort check comes first;
-- the call itself runs shielded, so a change that was made is reported as made (a cancellation
-- then takes effect at the caller's next yielding call). → output | nil, raw err
local function change(sb, args, op)
  if cancel_requested() then return nil, fs_err("FS_ABORTED", op .. " aborted") end
  local out, err, canceled = shielded_call("mbwrap " .. args[1], function() return sb:tool(args) end)
  rearm(canceled)
  return out, err
end

local function malformed(tool) return fs_err("FS_IO_ERROR", "mbwrap " .. tool .. ": malformed output") end

-- Removes the name target.displayPath gives (its last component is not followed: a symlink is
-- removed, not what it leads to). opts: { recursive = bool }: a directory with its contents
-- (never following links inside; not atomic: what was removed before a failure stays removed).
-- → { type = "file"|"directory"|"symlink"|"other" } (what was removed) | nil, err
-- FS_NOT_FOUND, FS_NOT_EMPTY (a non-empty directory without recursive), FS_PERMISSION_DENIED,
-- FS_INVALID_TARGET (the root, a mount point), FS_NOT_DIRECTORY (a parent is not one).
function FS:remove(target, opts)
  paths.check_target(target, "fs:remove")
  opts = check_opts(opts, OPTIONS.remove, "fs:remove: opts", 2)
  local display = target.displayPath
  local sb, err = self:_sandbox("remove", display)
  if not sb then return nil, err end
  local args = { "remove" }
  if opts.recursive then args[#args + 1] = "-r" end
  args[#args + 1] = display
  return self:_locked(target.targetKey, function()
    local out, terr = change(sb, args, "remove")
    if not out then return nil, map_err("remove", display, terr) end
    local kind = out:match("^ok (%a+)\n$")
    if not kind then return nil, malformed("remove") end
    return { type = kind }
  end)
end

-- Makes the directory target.displayPath names. opts: { parents = bool }: also its missing
-- parents, and an existing directory (a link to one included) is fine.
-- → { created = bool, version } | nil, err
-- FS_ALREADY_EXISTS (it exists: without parents; or it is not a directory), FS_NOT_FOUND (the
-- parent is missing, without parents), FS_NOT_DIRECTORY (a parent is not one), FS_PERMISSION_DENIED.
function FS:mkdir(target, opts)
  paths.check_target(target, "fs:mkdir")
  opts = check_opts(opts, OPTIONS.mkdir, "fs:mkdir: opts", 2)
  local display = target.displayPath
  local sb, err = self:_sandbox("mkdir", display)
  if not sb then return nil, err end
  local args = { "mkdir" }
  if opts.parents then args[#args + 1] = "-p" end
  args[#args + 1] = display
  return self:_locked(target.targetKey, function()
    local out, terr = change(sb, args, "mkdir")
    if not out then return nil, map_err("make directory", display, terr) end
    local how, ver = out:match("^ok (%a+) (%S+)\n$")
    if not how then return nil, malformed("mkdir") end
    return { created = how == "created", version = "e2b:" .. ver }
  end)
end

-- Moves the name from.displayPath gives to to.displayPath, atomically (rename(2): neither last
-- component is followed; an existing destination is replaced). opts: { noReplace = bool }: an
-- existing destination is an error instead (renameat2 RENAME_NOREPLACE).
-- → { type, version } (of what now is at `to`) | nil, err
-- FS_NOT_FOUND (the source, or the destination's directory, is missing), FS_ALREADY_EXISTS
-- (noReplace), FS_NOT_EMPTY (over a non-empty directory), FS_CROSS_DEVICE (another file system:
-- no copy is made), FS_INVALID_TARGET (a directory into itself, the root), FS_NOT_DIRECTORY /
-- FS_NOT_REGULAR_FILE (a directory over a non-directory / the reverse), FS_PERMISSION_DENIED.
function FS:rename(from, to, opts)
  paths.check_target(from, "fs:rename (from)")
  paths.check_target(to, "fs:rename (to)")
  opts = check_opts(opts, OPTIONS.rename, "fs:rename: opts", 2)
  local sb, err = self:_sandbox("rename", from.displayPath)
  if not sb then return nil, err end
  local args = { "rename" }
  if opts.noReplace then args[#args + 1] = "--no-replace" end
  args[#args + 1] = from.displayPath
  args[#args + 1] = to.displayPath
  local function run()
    local out, terr = change(sb, args, "rename")
    if not out then return nil, map_err(("rename %q to"):format(from.displayPath), to.displayPath, terr) end
    local kind, ver = out:match("^ok (%a+) (%S+)\n$")
    if not kind then return nil, malformed("rename") end
    return { type = kind, version = "e2b:" .. ver }
  end
  -- both names' keys, always in the same order (two renames in opposite directions never wait
  -- for each other)
  local a, b = from.targetKey, to.targetKey
  if a == b then return self:_locked(a, run) end
  if b < a then a, b = b, a end
  return self:_locked(a, function() return self:_locked(b, run) end)
end

-- mbwrap read output → info | false (absent), content (nil unless a regular file within max),
-- after (the version once read) | nil (malformed)
function M.parse_read(out)
  local head, rest = out:match("^([^\n]*\n)(.*)$")
  if not head then return nil end
  local info = M.parse_stat(head)
  if not info then return info end
  if info.type ~= "file" or rest == "" then return info end
  local body, n, ver = rest:match("^(.*)\nend (%d+) (%S+)\n$")
  n = tonumber(n)
  if not body or #body ~= n then return nil end
  return info, body, "e2b:" .. ver
end

-- Version and content in one request (mbwrap read: the version, the bytes, the version again).
-- A file that changed while it was read is read again (EDIT_READ_TRIES), then FS_IO_ERROR.
local EDIT_READ_TRIES = 3

-- → info (false: absent), content (nil unless a regular file within max) | nil, err
function FS:_read_versioned(sb, target, max, op)
  for _ = 1, EDIT_READ_TRIES do
    local out, err = sb:tool({ "read", target.targetKey, tostring(math.tointeger(max)) },
      { max_bytes = max + 4096 })
    if not out then return nil, map_err(op, target.displayPath, err) end
    local info, content, after = M.parse_read(out)
    if info == nil then return nil, fs_err("FS_IO_ERROR", "mbwrap read: malformed output") end
    if info == false or content == nil then return info end
    if after == info.version then return info, content end
    -- changed while it was read: again
  end
  return nil, fs_err("FS_IO_ERROR", ("cannot %s %q: it kept changing while it was read"):format(op, target.displayPath))
end

-- edit: { oldString, newString, replaceAll }; expected: nil or { version = v }
function FS:editText(target, edit, expected)
  paths.check_target(target, "fs:editText")
  if type(edit) ~= "table" then error("editText: edit must be a table", 2) end
  fields.only(edit, OPTIONS.edit, "editText: edit", 2)
  if expected ~= nil then fields.only(expected, OPTIONS.editExpected, "editText: expected", 2) end
  local sb, err = self:_sandbox("edit", target.displayPath)
  if not sb then return nil, err end
  return self:_locked(target.targetKey, function()
    local info, raw = self:_read_versioned(sb, target, self.config.maxReadBytes, "edit")
    if info == nil then return nil, raw end
    if info == false then
      return nil, fs_err("FS_STALE_VERSION", ("cannot edit %q: file no longer exists"):format(target.displayPath))
    end
    if info.type ~= "file" then
      return nil, fs_err("FS_NOT_REGULAR_FILE", ("cannot edit %q: not a regular file"):format(target.displayPath))
    end
    if expected and expected.version ~= info.version then
      return nil, fs_err("FS_STALE_VERSION", ("cannot edit %q: file changed since it was read"):format(target.displayPath))
    end
    if info.size > self.config.maxReadBytes then
      return nil, fs_err("FS_TOO_LARGE", ("%q is %d bytes, over the %d byte limit"):format(target.displayPath,
        info.size, self.config.maxReadBytes))
    end
    local r, eerr = text.edit(raw, edit)
    if not r then
      if eerr.code == "FS_NOT_TEXT" then return nil, text_err("edit", target.displayPath, eerr) end
      return nil, eerr
    end
    -- the new text must be text as well (a NUL or a broken sequence in newString)
    local nerr = text.check_text(r.stored)
    if nerr then
      return nil, fs_err("FS_NOT_TEXT", ("cannot edit %q: the result would not be text (%s)"):format(target.displayPath,
        nerr.message), nerr)
    end
    local res, perr = self:_publish(sb, target, r.stored, { "--expect", strip_version(info.version) }, "edit")
    if not res then return nil, perr end
    return { version = res.version, before = r.before, after = r.after }
  end)
end

-- Watches the directory target names (E2B's watchDir): one `mbwrap watch` in the world
-- (moonbox.fs.watch). opts: { recursive = bool (the directories below it too, those made later
-- included), maxEvents = the queue's size (default 1024, 1 .. 2^20) }. Returns once the watch is
-- in place: every later change is reported. → watcher | nil, err: FS_NOT_FOUND,
-- FS_NOT_DIRECTORY, FS_PERMISSION_DENIED, FS_TOO_LARGE (over 16384 directories to watch).
-- watcher:next(timeout_ms) → { type = "create"|"write"|"remove"|"rename"|"chmod", path, name }
-- | { type = "overflow", dropped = n, kernel = true|nil } | nil, err (MB_TIMEOUT; once the watch
-- ended its error: MB_CLOSED after close, FS_NOT_FOUND when the directory went). watcher:close()
-- ends the process; so do the service's dispose and the cancellation (or failure) of the task
-- that started it.
function FS:watch(target, opts)
  paths.check_target(target, "fs:watch")
  opts = check_opts(opts, OPTIONS.watch, "fs:watch: opts", 2)
  local max = opts.maxEvents or watch.DEFAULT_MAX_EVENTS
  if max ~= math.floor(max) or max < 1 or max > watch.MAX_EVENTS_LIMIT then
    error(("fs:watch: opts: maxEvents must be a whole number from 1 to %d"):format(watch.MAX_EVENTS_LIMIT), 2)
  end
  local display = target.displayPath
  if self.disposed then return nil, errors.new("MB_CLOSED", "fs service is disposed") end
  local sb, err = self:_sandbox("watch", display)
  if not sb then return nil, err end
  local args = { "watch" }
  if opts.recursive then args[#args + 1] = "-r" end
  args[#args + 1] = target.targetKey
  local s, serr = sb:tool_stream(args, { stdout = "pipe", stderr = "discard" }, { lasting = true })
  if not s then return nil, map_err("watch", display, serr) end
  local w = watch.new{ fs = self, sb = sb, s = s, target = target, recursive = opts.recursive == true,
    max = math.tointeger(max), timeouts = self.timeouts, map_err = map_err, shielded = shielded }
  local ok, werr = w:_start()
  if not ok then return nil, werr end
  self.watchers[w] = true
  local owner = sched.current()
  if owner then
    w.owner = owner
    sched.on_abandon(owner, w, function() w:close() end)
  end
  sched.spawn(function() w:_pump() end)
  return w
end

function FS:dispose()
  self.disposed = true
  local open = {}
  for w in pairs(self.watchers) do open[#open + 1] = w end
  for _, w in ipairs(open) do w:close() end
  if self.on_dispose then return self.on_dispose() end
  return true
end

-- world(): → the execution world | nil, err (it may wait for it: an E2B owner's setup).
function M.new(world, config, policies, on_dispose)
  policies = policies or {}
  return setmetatable({ world = world, config = config, locks = locks.new(), on_dispose = on_dispose, watchers = {},
    timeouts = policies.timeouts or policy_set.default("timeouts") }, FS)
end

M.FS = FS
return M
