-- moonbox.workspace — plugin "workspace" (`ctx.workspace`): a host directory into the execution
-- world, and the world's changes back, in a constant number of requests.
--
--   ctx.workspace:push{ from = hostDir, to = worldDir, exclude = { "pattern", ... }, gitignore = bool,
--                       maxFiles, maxBytes, maxMetaBytes, onProgress = fn }
--     → { files, dirs, symlinks, bytes, archiveBytes, excluded, from, to } | nil, err
--   ctx.workspace:pull{ from = worldDir, to = hostDir, prefer = "sandbox" | "host", exclude, gitignore,
--                       maxFiles, maxBytes, onProgress }
--     → { added, modified, deleted, modeChanged = { path... }, conflicts = { { path, change, reason,
--         resolution } }, same, files, bytes, from, to } | nil, err
--   ctx.workspace:diff{ ...as pull } → what pull would do (the same report), writing nothing
--
-- It injects `fs` and works on the world that provider runs in (moonbox.world.common: a sandbox
-- for plugin "fs", this host for "fs-local": then a local copy with the same semantics).
--
-- push: the host tree is scanned (never following a link; .gitignore rules when asked; device
--   files, FIFOs and sockets refused by name), archived as ONE tar stream (libarchive, in C) that
--   is uploaded while it is written (2 requests in a sandbox: the upload and `mbwrap unpack`,
--   which untars into a staging directory next to the target and swaps it in with one rename).
--   The target becomes exactly the pushed tree; an interrupted push leaves it as it was. Every
--   file is hashed as it is archived: the base, recorded on the host (manifest.lua).
-- pull: `mbwrap manifest` hashes the world's tree (1 request); what changed since the base is
--   fetched as one tar stream (`mbwrap pack`, 1 request per 48 KiB of names), checked entry by
--   entry on the host (nothing outside the asked-for paths, no "..", absolute path, hard link,
--   device file or symlinked parent), staged in a private directory inside the host tree, and
--   then placed, each file by one rename. A host entry changed since the base is a conflict
--   (plan.lua): reported, not overwritten, unless `prefer` says which side wins.
--
-- Errors are `nil, err` with SYNC_* codes (lua/README.md), transport errors keep their E2B_*;
-- a canceled task gets SYNC_ABORTED (a publication in flight is finished first). Bad arguments
-- raise.
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"
local ids = require "moonbox.ids"
local paths = require "moonbox.fs.paths"
local locks = require "moonbox.fs.lock"
local manifest = require "moonbox.workspace.manifest"
local plan = require "moonbox.workspace.plan"
local mb = require "moonbox"
local core = require "moonbox.core"
local cancellation = require "moonbox.cancellation"
local common = require "moonbox.world.common"

local M = { name = "workspace", provides = "workspace", inject = { "fs" } }

local function positive(v) if v ~= v or v < 1 or v ~= math.floor(v) or v > 2 ^ 53 then return "must be a positive integer" end end
local function strings(v)
  for k, s in pairs(v) do
    if math.type(k) ~= "integer" or type(s) ~= "string" then return "must be a list of strings" end
  end
end
M.schema = {
  maxFiles = { type = "number", default = 100000, check = positive },
  maxBytes = { type = "number", default = 4 * 1024 * 1024 * 1024, check = positive },
  maxMetaBytes = { type = "number", default = 64 * 1024 * 1024, check = positive },
  exclude = { type = "table", default = function() return {} end, check = strings },
  gitignore = { type = "boolean", default = false },
  stateDir = { type = "string", check = function(v) if v:sub(1, 1) ~= "/" then return "must be an absolute path" end end },
  tar = { type = "string", default = "tar" },
  sha256sum = { type = "string", default = "sha256sum" },
  transferTimeoutMs = { type = "number", default = 600000, check = positive },
  progressMs = { type = "number", default = 100, check = positive },
}

local SCAN_STEP = 2000          -- names per scan step
local STEP_BYTES = 4 * 1024 * 1024
local FETCH_LIST_BYTES = 48 * 1024
local TAR_SLACK = 64 * 1024     -- a tar stream's headers and padding beyond its files' bytes

local W = {}
W.__index = W
M.Workspace = W


local function fail(code, msg, fields) return nil, errors.new(code, msg, fields) end
local function aborted(op) return fail("SYNC_ABORTED", op .. " aborted") end
local function is_cancel(err) return errors.is(err) and (err.code == "MB_CANCELED" or err.code == "FS_ABORTED") end

-- A pause between steps of host work: the loop runs meanwhile. → true | nil (canceled)
local function yield()
  local _, err = mb.sleep(0)
  return err == nil
end

-- a cancellation asked while not blocked, consumed and given back (as the fs service does)
local cancel_requested, rearm = cancellation.requested, cancellation.rearm

-- fn in a task of its own (the caller's cancel cannot interrupt it). → value, err, canceled
local function shielded_call(fn)
  local r, canceled = cancellation.shielded(fn)
  if not r[1] then return nil, errors.new("SYNC_IO_ERROR", "raised: " .. tostring(r[2])), canceled end
  return r[2], r[3], canceled
end

-- A tool's failure: TOOL_SYNC_X → SYNC_X; the rest as it is.
local function tool_err(err)
  if errors.is(err) then
    local code = err.code:match("^TOOL_(SYNC_[%u_]+)$")
    if code then return errors.new(code, (err.message:gsub("^mbwrap %w+: ", "")), { cause = err }) end
    if err.code:match("^TOOL_") then return errors.new("SYNC_REMOTE_TOOL", err.message, { cause = err }) end
  end
  return err
end

local function bad(what, fmt, ...) error(("workspace:%s: " .. fmt):format(what, ...), 4) end

local OPTIONS = { "from", "to", "exclude", "gitignore", "maxFiles", "maxBytes", "maxMetaBytes", "prefer", "onProgress" }
M.OPTIONS = OPTIONS

local function check_opts(opts, what)
  if type(opts) ~= "table" then bad(what, "expects a table { from = ..., to = ... }") end
  local unknown = fields.unknown(opts, OPTIONS, "workspace:" .. what)
  if unknown then error(unknown, 3) end
  for _, k in ipairs({ "from", "to" }) do
    local v = opts[k]
    if type(v) ~= "string" or v == "" or v:find("\0", 1, true) then bad(what, "%s must be a non-empty path", k) end
  end
  if opts.exclude ~= nil and (type(opts.exclude) ~= "table" or strings(opts.exclude)) then
    bad(what, "exclude must be a list of pattern strings")
  end
  if opts.gitignore ~= nil and type(opts.gitignore) ~= "boolean" then bad(what, "gitignore must be a boolean") end
  for _, k in ipairs({ "maxFiles", "maxBytes", "maxMetaBytes" }) do
    if opts[k] ~= nil and (type(opts[k]) ~= "number" or positive(opts[k])) then bad(what, "%s must be a positive integer", k) end
  end
  if opts.prefer ~= nil and opts.prefer ~= "sandbox" and opts.prefer ~= "host" then
    bad(what, 'prefer must be "sandbox" or "host"')
  end
  if opts.onProgress ~= nil and type(opts.onProgress) ~= "function" then bad(what, "onProgress must be a function") end
end

-- A host directory as an absolute lexical path (relative: against $PWD).
local function host_path(p)
  if p:sub(1, 1) ~= "/" then p = (os.getenv("PWD") or ".") .. "/" .. p end
  return paths.lexical(p, "/")
end

function W:_limits(opts)
  local c = self.config
  return { maxFiles = math.tointeger(opts.maxFiles or c.maxFiles), maxBytes = math.tointeger(opts.maxBytes or c.maxBytes),
    maxMetaBytes = math.tointeger(opts.maxMetaBytes or c.maxMetaBytes) }
end

local function report(fn, p) if fn then fn(p) end end

-- Calls fn every `ms` until the returned stop() (a raise in fn is kept for the caller).
local function ticker(fn, ms)
  if not fn then return function() end end
  local m = mb
  local stop, raised = false, nil
  local t = m.spawn(function()
    while not stop do
      local _, err = m.sleep(ms)
      if err or stop then return end
      local ok, e = pcall(fn)
      if not ok then raised = raised or e end
    end
  end)
  return function()
    stop = true
    t:cancel()
    if raised then error(raised, 0) end
  end
end

------------------------------------------------------------------------------------------------
-- push

function W:push(opts)
  check_opts(opts, "push")
  local world, err = self.world()
  if not world then return nil, err end
  local from, to = host_path(opts.from), paths.lexical(opts.to, world.cwd)
  if to == "/" then bad("push", "to must not be the root directory") end
  local key = manifest.key(world:identity(), to, from)
  local r = table.pack(self.locks:run(key, function() return self:_push(world, from, to, key, opts) end))
  if r[1] == nil and is_cancel(r[2]) then return aborted("push") end
  return table.unpack(r, 1, r.n)
end

function W:_push(world, from, to, key, opts)
  local limits = self:_limits(opts)
  local exclude = opts.exclude or self.config.exclude
  local gitignore = opts.gitignore
  if gitignore == nil then gitignore = self.config.gitignore end
  local progress = opts.onProgress
  local root, rerr = core.sync_root(from)
  if not root then return nil, rerr end
  local scan, serr = root:scan{ exclude = table.concat(exclude, "\n"), gitignore = gitignore,
    maxFiles = limits.maxFiles, maxBytes = limits.maxBytes, maxMetaBytes = limits.maxMetaBytes }
  if not scan then return nil, serr end
  repeat
    local done, e = scan:step(SCAN_STEP)
    if done == nil then return nil, e end
    if not done and not yield() then return aborted("push") end
  until done
  local entries = scan:entries()
  local files, dirs, links = 0, 0, 0
  for i = 2, #entries do
    local t = entries[i].type
    if t == "file" then files = files + 1 elseif t == "directory" then dirs = dirs + 1 else links = links + 1 end
  end
  local total = scan:bytes()
  report(progress, { phase = "scan", files = 0, totalFiles = files, bytes = 0, totalBytes = total })

  local pack, perr = root:pack(scan)
  if not pack then return nil, perr end
  local stage = (paths.dirname(to) == "/" and "" or paths.dirname(to)) .. "/.moonbox-sync-" .. ids.hex(8) .. ".tmp"
  local function remove_stage() shielded_call(function() return world:remove_tree(stage) end) end
  local stop = ticker(progress and function()
    local p = pack:progress()
    progress{ phase = "upload", files = p.files, totalFiles = files, bytes = p.bytes_in, totalBytes = total }
  end, self.config.progressMs)
  local up, uerr = world:put_stream(stage .. "/archive.tar", pack, { timeout_ms = math.tointeger(self.config.transferTimeoutMs) })
  stop()
  local archive_bytes = pack:progress().bytes_out
  if not up then
    local packerr = pack:error()
    pack:close()
    remove_stage()
    if packerr then return nil, packerr end
    if is_cancel(uerr) then return aborted("push") end
    return nil, uerr
  end
  pack:close()
  -- The last abort point: from here on the publication is finished whatever the caller does.
  if cancel_requested() then
    remove_stage()
    return aborted("push")
  end
  report(progress, { phase = "unpack", files = files, totalFiles = files, bytes = total, totalBytes = total })
  local args = { "unpack", "--max-files", tostring(limits.maxFiles), "--max-bytes", tostring(limits.maxBytes),
    "--max-meta", tostring(limits.maxMetaBytes), "--tar", self.config.tar, stage, to }
  local out, terr, canceled = shielded_call(function()
    return world:tool(args, { timeout_ms = math.tointeger(self.config.transferTimeoutMs) })
  end)
  if not out then
    rearm(canceled)
    return nil, tool_err(terr)
  end
  local f, d, l, b = out:match("^ok (%d+) (%d+) (%d+) (%d+)\n$")
  if not f or tonumber(f) ~= files or tonumber(d) ~= dirs or tonumber(l) ~= links or tonumber(b) ~= total then
    rearm(canceled)
    return fail("SYNC_REMOTE_TOOL", ("the world unpacked %s (sent: %d files, %d directories, %d links, %d bytes)"):format(
      out:gsub("\n", ""), files, dirs, links, total))
  end
  entries = scan:entries()               -- again: the pack hashed every file as it read it
  local base = { world = world:identity(), sandboxDir = to, hostDir = from, exclude = exclude, gitignore = gitignore,
    at = os.time(), entries = {} }
  for i = 2, #entries do base.entries[entries[i].path] = manifest.from_scan(entries[i]) end
  local ok, werr = manifest.save(manifest.state_dir(self.config), key, base)
  rearm(canceled)
  if not ok then return nil, werr end
  report(progress, { phase = "done", files = files, totalFiles = files, bytes = total, totalBytes = total })
  return { files = files, dirs = dirs, symlinks = links, bytes = total, archiveBytes = archive_bytes,
    excluded = scan:excluded(), from = from, to = to }
end

------------------------------------------------------------------------------------------------
-- pull / diff

function W:pull(opts)
  check_opts(opts, "pull")
  return self:_sync(opts, false)
end

function W:diff(opts)
  check_opts(opts, "diff")
  return self:_sync(opts, true)
end

function W:_sync(opts, dry)
  local what = dry and "diff" or "pull"
  local world, err = self.world()
  if not world then return nil, err end
  local from, to = paths.lexical(opts.from, world.cwd), host_path(opts.to)
  local key = manifest.key(world:identity(), from, to)
  local r = table.pack(self.locks:run(key, function() return self:_pull(world, from, to, key, opts, dry) end))
  if r[1] == nil and is_cancel(r[2]) then return aborted(what) end
  return table.unpack(r, 1, r.n)
end

-- The world's tree: `mbwrap manifest` streamed and parsed as it comes. → entries, excluded | nil, err
function W:_remote_manifest(world, dir, base, opts, limits)
  local exclude = opts.exclude or base.exclude or {}
  local gitignore = opts.gitignore
  if gitignore == nil then gitignore = base.gitignore end
  local args = { "manifest", "--max-files", tostring(limits.maxFiles), "--max-bytes", tostring(limits.maxBytes),
    "--max-meta", tostring(limits.maxMetaBytes), "--sha256sum", self.config.sha256sum }
  if gitignore then args[#args + 1] = "--gitignore" end
  if #exclude > 0 then
    args[#args + 1] = "--exclude"
    args[#args + 1] = core.b64encode(table.concat(exclude, "\n"))
  end
  args[#args + 1] = dir
  local s, serr = world:tool_stream(args, { stdout = "pipe", stderr = { tail = 8192 } })
  if not s then return nil, tool_err(serr) end
  local parser = manifest.parser(limits.maxFiles)
  local idle = world.timeouts and world.timeouts.stream_idle_ms or 150000
  while true do
    local chunk, rerr = s:read("stdout", idle)
    if chunk == nil then
      if rerr then s:close() return nil, rerr end
      break
    end
    local ok, perr = parser:feed(chunk)
    if not ok then s:close() return nil, perr end
  end
  local facts, ferr = common.finished(world, s, idle)
  local errtext = s:read_from("stderr", 0)
  s:close()
  if ferr then return nil, ferr end
  for _, f in ipairs(facts) do
    if f.kind == "exit" and f.value ~= 0 then
      local code, detail = errtext:match("^err (%S+) ?([^\n]*)")
      -- the entry concerned, exact bytes, when the world's walker named one
      local plen, at = errtext:match("\npath (%d+) ()")
      local path = plen and errtext:sub(at, at + tonumber(plen) - 1) or nil
      return fail(code and code:match("^SYNC_") and code or "SYNC_REMOTE_TOOL",
        ("%s: %s"):format(dir, detail or errtext), { path = path })
    end
  end
  return parser:finish()
end

-- The host's side of one change: its lstat (false: absent) and a hash on demand.
local function host_state(root, path, cache)
  local H, err = root:lstat(path)
  if H == nil then return nil, err end
  local function hash()
    if cache[path] ~= nil then return cache[path] end
    local h, herr = root:hash(path)
    if not h then return nil, herr end
    while true do
      local hex, sherr = h:step(STEP_BYTES)
      if hex == nil then h:close() return nil, sherr end
      if hex then cache[path] = hex return hex end
      if not yield() then h:close() return nil, errors.new("MB_CANCELED", "hash canceled") end
    end
  end
  return H, hash
end

-- Has an ancestor of path a change that makes it a directory (so a host parent that is a link
-- or a file now will be replaced before path is written)?
local function parent_becomes_dir(path, by_path)
  local p = path:match("^(.*)/[^/]*$")
  while p do
    local c = by_path[p]
    if c and c.s and c.s.t == "d" and c.decision == "apply" then return true end
    p = p:match("^(.*)/[^/]*$")
  end
  return false
end

function W:_pull(world, from, to, key, opts, dry)
  local limits = self:_limits(opts)
  local progress = opts.onProgress
  local base, berr = manifest.load(manifest.state_dir(self.config), key)
  if base == nil then return nil, berr end
  if base == false then
    return fail("SYNC_NO_BASE", ("nothing was pushed from %s to %s in this world (%s): push first"):format(to, from,
      world:identity()), { path = from })
  end
  local root, rerr = core.sync_root(to)
  if not root then return nil, rerr end
  report(progress, { phase = "manifest" })
  local S, X = self:_remote_manifest(world, from, base, opts, limits)
  if not S then return nil, X end
  local changes, cerr = plan.changes(base.entries, S, X)
  if not changes then return nil, cerr end

  -- Each change against the host.
  local prefer = opts.prefer
  local res = { added = {}, modified = {}, deleted = {}, modeChanged = {}, conflicts = {}, same = 0, files = 0, bytes = 0,
    from = from, to = to }
  local by_path, hashes = {}, {}
  for _, c in ipairs(changes) do by_path[c.path] = c end
  for _, c in ipairs(changes) do
    local H, hash = host_state(root, c.path, hashes)
    if H == nil then
      if (hash.code == "SYNC_UNSAFE_PATH" or hash.code == "SYNC_NOT_DIRECTORY") and parent_becomes_dir(c.path, by_path) then
        H, hash = false, function() return nil end
      elseif is_cancel(hash) then
        return aborted(dry and "diff" or "pull")
      else
        c.decision, c.reason = "blocked", hash.message
      end
    end
    if not c.decision then
      local d, why = plan.decide(c, H, hash)
      if d == nil then
        if is_cancel(why) then return aborted(dry and "diff" or "pull") end
        return nil, why
      end
      c.H, c.decision, c.reason = H, d, why
      if d == "conflict" and prefer == "sandbox" then c.decision, c.resolution = "apply", "sandbox"
      elseif d == "conflict" and prefer == "host" then c.resolution = "host" end
    end
  end

  local function listed(c)
    local list = c.kind == "added" and res.added or c.kind == "modified" and res.modified
      or c.kind == "deleted" and res.deleted or res.modeChanged
    list[#list + 1] = c.path
  end
  local function conflict(c, reason, resolution)
    res.conflicts[#res.conflicts + 1] = { path = c.path, change = c.kind, reason = reason, resolution = resolution }
  end
  local apply = {}
  for _, c in ipairs(changes) do
    if c.decision == "apply" then
      apply[#apply + 1] = c
      listed(c)
      if c.resolution then conflict(c, c.reason, c.resolution) end
    elseif c.decision == "same" then
      res.same = res.same + 1
    else
      conflict(c, c.reason, c.resolution)
    end
  end
  if dry then return res end

  -- Contents (files and links) come over as one tar stream per batch of names.
  local need = {}
  for _, c in ipairs(apply) do
    if c.s and c.s.t ~= "d" and c.kind ~= "mode" then need[#need + 1] = c end
  end
  local stage
  local function cleanup() if stage then root:rmtree(stage) end end
  if #need > 0 then
    root:sweep()
    stage = (".moonbox-sync-%d-%s.tmp"):format(core.getpid(), ids.hex(6))
    local ok, merr = root:mkstage(stage)
    if not ok then return nil, merr end
    local ok2, ferr = self:_fetch(world, root, stage, from, need, limits, progress)
    if not ok2 then
      cleanup()
      if is_cancel(ferr) then return aborted("pull") end
      return nil, ferr
    end
    res.files = #need
    for _, c in ipairs(need) do res.bytes = res.bytes + (c.item.size or 0) end
  end
  if cancel_requested() then
    cleanup()
    return aborted("pull")
  end

  -- Placement, shielded: a pull that started writing the host finishes.
  report(progress, { phase = "apply", files = 0, totalFiles = #apply })
  local _, _, canceled = shielded_call(function() return self:_apply(root, stage, apply, res, conflict, base, S) end)
  cleanup()
  for _, c in ipairs(changes) do
    if c.decision == "same" then base.entries[c.path] = self:_record(root, c.path, c.s) end
  end
  base.at = os.time()
  local ok, werr = manifest.save(manifest.state_dir(self.config), key, base)
  rearm(canceled)
  if not ok then return nil, werr end
  report(progress, { phase = "done", files = #apply, totalFiles = #apply })
  return res
end

-- A base record for what the host now has at path, as the sandbox described it.
function W:_record(root, path, s)
  local r = { t = s.t, m = s.m, s = s.s, h = s.h, l = s.l }
  local H = root:lstat(path)
  if H then r.v = H.version end
  return r
end

-- Fetches the contents of `need` into the staging directory: c.item = the staged entry.
function W:_fetch(world, root, stage, from, need, limits, progress)
  local batches, cur, size = {}, {}, 0
  for _, c in ipairs(need) do
    if #cur > 0 and size + #c.path + 1 > FETCH_LIST_BYTES then
      batches[#batches + 1] = cur
      cur, size = {}, 0
    end
    cur[#cur + 1] = c
    size = size + #c.path + 1
  end
  batches[#batches + 1] = cur
  local budget = limits.maxBytes
  -- progress in archive bytes against what the archives will hold: a 512-byte header per entry,
  -- its data in 512-byte blocks, 1 KiB of end per archive (long names add a little: clamped)
  local total_files, got_files, streamed = #need, 0, 0
  local total_bytes = 1024 * #batches
  for _, c in ipairs(need) do
    local size = c.s.t == "f" and (c.s.s or 0) or 0
    total_bytes = total_bytes + 512 + (size + 511) // 512 * 512
  end
  for bi, batch in ipairs(batches) do
    local names, want = {}, {}
    for i, c in ipairs(batch) do
      names[i] = c.path
      want[c.path] = c
    end
    local archive = ("%s/%s/archive-%d.tar"):format(root:path(), stage, bi)
    local f, oerr = io.open(archive, "wb")
    if not f then return fail("SYNC_IO_ERROR", "cannot write " .. archive .. ": " .. tostring(oerr)) end
    local cap = budget + TAR_SLACK + 1024 * #batch
    local s, serr = world:tool_stream({ "pack", "--max-bytes", tostring(math.tointeger(cap)), "--tar", self.config.tar, from,
      core.b64encode(table.concat(names, "\0") .. "\0") }, { stdout = "pipe", stderr = { tail = 8192 } })
    if not s then f:close() return nil, tool_err(serr) end
    local idle = world.timeouts and world.timeouts.stream_idle_ms or 150000
    local n = 0
    while true do
      local chunk, rerr = s:read("stdout", idle)
      if chunk == nil then
        if rerr then s:close() f:close() return nil, rerr end
        break
      end
      n = n + #chunk
      if n > cap then
        s:close()
        f:close()
        return fail("SYNC_TOO_LARGE", ("the changed files are over maxBytes (%d bytes)"):format(limits.maxBytes))
      end
      local ok, werr = f:write(chunk)
      if not ok then s:close() f:close() return fail("SYNC_IO_ERROR", "cannot write " .. archive .. ": " .. tostring(werr)) end
      if progress then
        progress{ phase = "fetch", files = got_files, totalFiles = total_files, bytes = math.min(streamed + n, total_bytes),
          totalBytes = total_bytes }
      end
    end
    streamed = streamed + n
    local facts, ferr = common.finished(world, s, idle)
    local errtext = s:read_from("stderr", 0)
    s:close()
    f:close()
    if ferr then return nil, ferr end
    for _, fact in ipairs(facts) do
      if fact.kind == "exit" and fact.value ~= 0 then
        local code, detail = errtext:match("^err (%S+) ?([^\n]*)")
        return fail(code and code:match("^SYNC_") and code or "SYNC_REMOTE_TOOL", detail or errtext)
      end
    end
    -- Untrusted: every entry is checked, staged under a name of our own, hashed.
    -- one entry more than asked for is let through to be named (an archive with more fails on the count)
    local u, uerr = root:unpack(archive, stage, #batch + 1, budget, ("b%d-"):format(bi))
    if not u then return nil, uerr end
    repeat
      local done, e = u:step(STEP_BYTES)
      if done == nil then u:close() return nil, e end
      if not done and not yield() then u:close() return nil, errors.new("MB_CANCELED", "pull canceled") end
    until done
    local items = u:items()
    u:close()
    os.remove(archive)
    local ok, cerr = plan.check_items(items, want)
    if not ok then return nil, cerr end
    for _, it in ipairs(items) do
      budget = budget - (it.size or 0)
      got_files = got_files + 1
    end
  end
  return true
end

local function depth(p) local _, n = p:gsub("/", "") return n end

-- Writes the host: removals (files, then directories deepest first), directories (shallowest
-- first), then files and links by rename and mode changes. A step the host refuses (changed
-- meanwhile, a directory not empty, a symlinked parent) becomes a conflict; the rest goes on.
function W:_apply(root, stage, apply, res, conflict, base, S)
  local failed = {}
  local function refuse(c, err)
    failed[c] = true
    conflict(c, err.message, nil)
    -- it is not applied after all: out of the kind's list
    for _, list in ipairs({ res.added, res.modified, res.deleted, res.modeChanged }) do
      for i = #list, 1, -1 do if list[i] == c.path then table.remove(list, i) end end
    end
  end
  local H = function(c) return c.H end
  -- 1. non-directories that go away or give way to a directory
  for _, c in ipairs(apply) do
    local h = H(c)
    if h and h.type ~= "directory" and (not c.s or c.s.t == "d") then
      local ok, err = root:unlink(c.path, h.version)
      if not ok then refuse(c, err) else c.removed = true end
    end
  end
  -- 2. directories that go away or give way to a file or link, deepest first
  local rm = {}
  for _, c in ipairs(apply) do
    local h = H(c)
    if not failed[c] and h and h.type == "directory" and (not c.s or c.s.t ~= "d") then rm[#rm + 1] = c end
  end
  table.sort(rm, function(a, b) return depth(a.path) > depth(b.path) end)
  for _, c in ipairs(rm) do
    local ok, err = root:rmdir(c.path)
    if not ok then refuse(c, err) else c.removed = true end
  end
  -- 3. directories made or given their mode, shallowest first
  local mk = {}
  for _, c in ipairs(apply) do if not failed[c] and c.s and c.s.t == "d" then mk[#mk + 1] = c end end
  table.sort(mk, function(a, b) return depth(a.path) < depth(b.path) end)
  for _, c in ipairs(mk) do
    local ok, err = root:mkdir(c.path, c.s.m)
    if not ok then refuse(c, err) end
  end
  -- 4. files and links by rename; mode-only changes
  for _, c in ipairs(apply) do
    if not failed[c] and c.s and c.s.t ~= "d" then
      local h = H(c)
      local ok, err
      if c.kind == "mode" then
        ok, err = root:chmod(c.path, c.s.m, h and h.version or "absent")
      else
        local expect = (h and not c.removed and h.type ~= "directory") and h.version or "absent"
        ok, err = root:place(stage .. "/" .. c.item.staged, c.path, expect)
      end
      if not ok then refuse(c, err) end
    end
  end
  -- The base follows what was applied.
  for _, c in ipairs(apply) do
    if not failed[c] then
      if not c.s then
        base.entries[c.path] = nil
      else
        local s = c.s
        if c.item then s = { t = s.t, m = c.item.mode, s = c.item.size, h = c.item.sha256, l = c.item.link } end
        base.entries[c.path] = self:_record(root, c.path, s)
      end
    end
  end
  return true
end

function W:dispose() return true end

function M.new(ctx, config)
  assert(ctx.fs and type(ctx.fs.world) == "function", "workspace: needs an fs provider (plugin fs or fs-local)")
  return setmetatable({ config = config, world = ctx.fs.world, locks = locks.new() }, W)
end

return M
