-- moonbox.e2b.background — the per-user background sandboxd (`moonbox sandboxd start|stop|status`,
-- and the endpoint of `moonbox sandbox|secret|sync` when no E2B variable is set).
--
-- One sandboxd per user, outliving the command that started it. Its files live in a private
-- directory: $XDG_RUNTIME_DIR/moonbox/sandboxd, else /tmp/moonbox-<uid>/sandboxd (each level
-- made 0700; an existing one must be a directory of this user that group and others cannot
-- write, or nothing is done). There:
--   lock          flock(2)ed by the daemon for its whole life (it inherits it as fd 3): one at a
--                 time, and whoever starts one holds it while starting
--   api-key       its API key (0600; made once, kept across restarts, so is its secret store);
--                 sandboxd reads it with --api-key-file: the key is never on a command line nor
--                 in an environment
--   pid           "<pid> <start time>" (/proc/PID/stat field 22: a reused pid never matches)
--   url           http://127.0.0.1:<port> (a free loopback port sandboxd picked)
--   sandboxd.log  its stdout and stderr (the previous run's: sandboxd.log.1)
--   state/        sandboxd's --state-dir (layers, snapshots, secrets, volumes)
-- A record whose process is gone, or whose pid now belongs to another program (another start
-- time, another executable), is stale: status says not running, start and stop remove it.
-- Every function that waits must run inside a moonbox task (moonbox.run).
local core = require "moonbox.core"
local errors = require "moonbox.errors"
local ids = require "moonbox.ids"
local endpoints = require "moonbox.e2b.endpoints"
local sched = require "moonbox.sched"
local client_mod = require "moonbox.e2b.client"
local policy_set = require "moonbox.policies"
local binaries = require "moonbox.binaries"

local M = {}

M.STOP_GRACE_MS = 30000       -- SIGTERM → SIGKILL: sandboxd destroys every sandbox first
M.MIN_START_MS = 30000        -- the first start may prepare the base layer

local function err(msg, fields) return errors.new("E2B_SANDBOXD", msg, fields) end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- path → a new file holding s, in place at once (a reader never sees half of it)
local function write_atomic(path, s)
  local tmp = path .. ".tmp"
  os.remove(tmp)
  local f, e = io.open(tmp, "wb")
  if not f then return nil, err("cannot write " .. tmp .. ": " .. tostring(e)) end
  f:write(s)
  f:close()
  local ok, rerr = os.rename(tmp, path)
  if not ok then return nil, err("cannot write " .. path .. ": " .. tostring(rerr)) end
  return true
end

-- The directory (and the one it is in) for this user. getenv: for specs.
function M.paths(getenv)
  getenv = getenv or os.getenv
  local uid = core.getuid()
  local run = getenv("XDG_RUNTIME_DIR")
  local base = (run and run ~= "") and (run:gsub("/+$", "") .. "/moonbox") or ("/tmp/moonbox-" .. uid)
  local dir = base .. "/sandboxd"
  return { base = base, dir = dir, lock = dir .. "/lock", key = dir .. "/api-key", pid = dir .. "/pid", url = dir .. "/url",
    log = dir .. "/sandboxd.log", state = dir .. "/state", uid = uid }
end

-- A directory of ours that only we can change: made (0700) when missing. → true | nil, err
local function private_dir(path, uid)
  local st = core.lstat(path)
  if not st then
    local ok, merr = core.mkdir(path, tonumber("700", 8))
    if not ok and merr.code ~= "MB_EXISTS" then return nil, err("cannot make " .. path .. ": " .. merr.message) end
    st = core.lstat(path)
    if not st then return nil, err("cannot make " .. path) end
  end
  if st.type ~= "dir" then
    return nil, err(("%s is not a directory (a %s): refusing to keep sandboxd's key there; remove it"):format(path,
      st.type == "link" and "symbolic link" or st.type))
  end
  if st.uid ~= uid then
    return nil, err(("%s belongs to uid %d, not to you (uid %d): refusing to keep sandboxd's key there; remove it"):format(
      path, st.uid, uid))
  end
  if st.mode & tonumber("022", 8) ~= 0 then
    return nil, err(("%s is writable by %s (mode %04o): refusing to keep sandboxd's key there; chmod 700 %s"):format(path,
      st.mode & tonumber("002", 8) ~= 0 and "others" or "its group", st.mode, path))
  end
  return true
end

-- The directories, checked (and made). → paths | nil, err
function M.prepare(getenv)
  local p = M.paths(getenv)
  local parent = p.base:match("^(.*)/[^/]+$")
  if parent and parent ~= "" and not core.lstat(parent) then
    return nil, err(("the runtime directory %s does not exist (XDG_RUNTIME_DIR)"):format(parent))
  end
  for _, d in ipairs({ p.base, p.dir }) do
    local ok, e = private_dir(d, p.uid)
    if not ok then return nil, e end
  end
  return p
end

-- /proc/PID/stat → start time (field 22), state (field 3) | nil
local function proc_stat(pid)
  local s = read_file("/proc/" .. pid .. "/stat")
  if not s then return nil end
  local rest = s:match("^.*%)%s+(.*)$")             -- after the command name, which may hold anything
  if not rest then return nil end
  local f = {}
  for w in rest:gmatch("%S+") do f[#f + 1] = w end
  return f[20], f[1]
end
M.proc_stat = proc_stat

-- The record → { pid, start, url } | nil
function M.read_record(p)
  local s = read_file(p.pid)
  local pid, start = (s or ""):match("^(%d+) (%d+)")
  if not pid then return nil end
  local url = (read_file(p.url) or ""):match("^(http://[%w%.%-:%[%]]+)")
  return { pid = math.tointeger(tonumber(pid)), start = start, url = url }
end

-- Is rec's process still the sandboxd it records? → true | false, why not
function M.alive(rec)
  local start, state = proc_stat(rec.pid)
  if not start or state == "Z" or state == "X" then return false, ("pid %d is gone"):format(rec.pid) end
  if start ~= rec.start then return false, ("pid %d is now another process"):format(rec.pid) end
  local exe = core.readlink("/proc/" .. rec.pid .. "/exe")
  if exe and not (exe:match("/sandboxd$") or exe:match("/sandboxd %(deleted%)$")) then
    return false, ("pid %d is now another program (%s)"):format(rec.pid, exe)
  end
  return true
end

-- Is the lock held (by a live daemon, or by someone starting one)?
local function lock_held(p)
  local l, e = core.lock_file(p.lock)
  if l then l:release() return false end
  return e.code == "MB_BUSY"
end

-- What is there: → { running, pid, url, stale (why the record is stale) } (paths p)
function M.probe(p)
  local rec = M.read_record(p)
  if not rec then return { running = false, starting = lock_held(p) } end
  local ok, why = M.alive(rec)
  if ok then return { running = true, pid = rec.pid, url = rec.url, start = rec.start } end
  return { running = false, pid = rec.pid, stale = why }
end

local function clear_record(p)
  os.remove(p.pid)
  os.remove(p.url)
end

-- The key: the file's, checked, or a new one. → key | nil, err
local function api_key(p)
  local st = core.lstat(p.key)
  if not st then
    local key = "e2b_" .. ids.hex(20)
    local ok, werr = core.write_private(p.key, key .. "\n")
    if not ok then return nil, err("cannot write the API key: " .. werr.message) end
    return key
  end
  if st.type ~= "file" or st.uid ~= p.uid or st.mode & tonumber("077", 8) ~= 0 then
    return nil, err(("%s is not a private file of yours (mode %04o): refusing to use it; remove it"):format(p.key, st.mode))
  end
  local key = (read_file(p.key) or ""):match("^(e2b_%x+)%s*$")
  if not key then return nil, err(p.key .. " does not hold an API key: remove it (a new one is made)") end
  return key
end

-- The key of a running daemon (for its clients). → key | nil, err
function M.key(p)
  if not core.lstat(p.key) then return nil, err(p.key .. " is missing: moonbox sandboxd stop, then start") end
  return api_key(p)
end

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  local pwd = os.getenv("PWD")
  if not pwd or pwd == "" then
    local h = io.popen("pwd")
    pwd = h and h:read("l") or "."
    if h then h:close() end
  end
  return pwd .. "/" .. path
end

-- sandboxd's environment: ours without the E2B endpoint variables (they name another endpoint).
local function daemon_env()
  local env = {}
  for k, v in pairs(core.environ()) do
    if not k:match("^E2B_") then env[k] = v end
  end
  return env
end

local function log_tail(p)
  local s = read_file(p.log) or ""
  s = s:gsub("%s+$", "")
  if #s > 1500 then s = "..." .. s:sub(-1500) end
  return s == "" and "(its log is empty)" or s
end

-- Starts the daemon unless one runs. opts: { timeouts }. → info | nil, err
-- info: { pid, url, key, paths, already (it was running), stale (the record replaced, why) }
function M.start(opts)
  opts = opts or {}
  local p, perr = M.prepare(opts.getenv)
  if not p then return nil, perr end
  local timeouts = opts.timeouts or policy_set.default("timeouts")
  local start_ms = math.max(timeouts.sandboxd_start_ms or 0, M.MIN_START_MS)
  local deadline = sched.now() + start_ms
  local lock
  while true do
    local st = M.probe(p)
    if st.running and st.url then
      local key, kerr = M.key(p)
      if not key then return nil, kerr end
      return { pid = st.pid, url = st.url, key = key, paths = p, already = true }
    end
    local l, lerr = core.lock_file(p.lock)
    if l then lock = l break end
    if lerr.code ~= "MB_BUSY" then return nil, err("cannot take " .. p.lock .. ": " .. lerr.message) end
    -- another command is starting it (or a daemon runs without a record: it says so below)
    if sched.now() > deadline then
      return nil, err(("%s is held by another process, but no running sandboxd is recorded in %s (is one starting?)"):format(
        p.lock, p.dir))
    end
    sched.sleep(100)
  end
  -- Ours to start: what the record says is stale (a live daemon would hold the lock).
  local before = M.read_record(p)
  local stale
  if before then
    local _, why = M.alive(before)
    stale = why or ("pid %d left no lock"):format(before.pid)
  end
  clear_record(p)
  local function fail(e) lock:release() return nil, e end
  local key, kerr = api_key(p)
  if not key then return fail(kerr) end
  local bin = binaries.find("MOONBOX_SANDBOXD", "sandboxd")
  if not bin then
    return fail(err("no sandboxd found (next to moonbox, in $MB_BUILD_DIR/bin, or set MOONBOX_SANDBOXD)"))
  end
  bin = absolute(bin)
  os.rename(p.log, p.log .. ".1")
  local pid, serr = core.daemon{ argv = { bin, "--listen", "127.0.0.1:0", "--api-key-file", p.key, "--state-dir", p.state },
    log = p.log, fds = { lock:fd() }, env = daemon_env() }
  if not pid then return fail(err("cannot start " .. bin .. ": " .. serr.message)) end
  local pstart = proc_stat(pid)
  local ok, werr = write_atomic(p.pid, ("%d %s\n"):format(pid, pstart or "0"))
  if not ok then core.kill(pid, "SIGKILL") return fail(werr) end
  local rec = { pid = pid, start = pstart }
  local url
  local until_ms = sched.now() + start_ms
  while true do
    url = (read_file(p.log) or ""):match("sandboxd listening on (http://[%d%.]+:%d+)")
    if url then break end
    if not pstart or not M.alive(rec) then
      clear_record(p)
      return fail(err(("sandboxd exited before it listened:\n%s"):format(log_tail(p))))
    end
    if sched.now() > until_ms then
      core.kill(pid, "SIGKILL")
      clear_record(p)
      return fail(err(("sandboxd did not report listening within %d ms:\n%s"):format(start_ms, log_tail(p))))
    end
    sched.sleep(50)
  end
  ok, werr = write_atomic(p.url, url .. "\n")
  if not ok then core.kill(pid, "SIGTERM") clear_record(p) return fail(werr) end
  lock:release()                                    -- sandboxd keeps it (its fd 3) for its life
  return { pid = pid, url = url, key = key, paths = p, stale = stale, started = true }
end

-- The endpoints of a running daemon's API (E2B variables, CA and connect-to rules do not apply).
function M.endpoints(url, key)
  local function getenv(name)
    if name == "E2B_API_URL" or name == "E2B_SANDBOX_URL" then return url end
    if name:match("^E2B_") or name == "MOONBOX_CA_FILE" or name == "MOONBOX_CONNECT_TO" then return nil end
    return os.getenv(name)
  end
  local ep = endpoints.resolve({ apiKey = key }, getenv)
  ep.background = true
  return ep
end

-- Its sandboxes (for status and stop). → count | nil, err
function M.sandbox_count(url, key)
  local c, cerr = client_mod.new{ endpoints = M.endpoints(url, key) }
  if not c then return nil, cerr end
  local all, lerr = c:listAll{}
  if not all then return nil, lerr end
  return #all
end

-- → { running, pid, url, paths, stale, sandboxes (count) | sandboxes_err } | nil, err (the directory)
function M.status(opts)
  opts = opts or {}
  local p, perr = M.prepare(opts.getenv)
  if not p then return nil, perr end
  local st = M.probe(p)
  st.paths = p
  if st.running and st.url then
    local key = M.key(p)
    if key then st.sandboxes, st.sandboxes_err = M.sandbox_count(st.url, key) end
  end
  return st
end

-- Stops it: SIGTERM (sandboxd destroys its sandboxes), SIGKILL after the grace.
-- → { was_running, pid, sandboxes (how many it had), killed (needed SIGKILL), stale } | nil, err
function M.stop(opts)
  opts = opts or {}
  local p, perr = M.prepare(opts.getenv)
  if not p then return nil, perr end
  local st = M.probe(p)
  if not st.running then
    if st.stale then clear_record(p) end
    return { was_running = false, stale = st.stale, pid = st.pid, paths = p }
  end
  local rec = M.read_record(p)
  local res = { was_running = true, pid = rec.pid, url = rec.url, paths = p }
  local key = M.key(p)
  if key and rec.url then res.sandboxes = M.sandbox_count(rec.url, key) end
  core.kill(rec.pid, "SIGTERM")
  local grace = opts.grace_ms or M.STOP_GRACE_MS
  local t0 = sched.now()
  while M.alive(rec) and sched.now() - t0 < grace do sched.sleep(50) end
  if M.alive(rec) then
    res.killed = true
    core.kill(rec.pid, "SIGKILL")
    local t1 = sched.now()
    while M.alive(rec) and sched.now() - t1 < 5000 do sched.sleep(50) end
  end
  if M.alive(rec) then return nil, err(("sandboxd (pid %d) did not exit"):format(rec.pid)) end
  -- the lock goes with its last holder (sandboxd; a moment later for what it started)
  local t2 = sched.now()
  while lock_held(p) and sched.now() - t2 < 5000 do sched.sleep(50) end
  clear_record(p)
  res.ms = sched.now() - t0
  return res
end

-- The endpoint of `moonbox sandbox|secret|sync`: the one E2B's variables name, else (none
-- set) the running daemon, else one started now (unless MOONBOX_SANDBOXD_AUTOSTART=0) with one
-- line on stderr. → endpoints | nil, err
function M.ensure_endpoints(opts)
  opts = opts or {}
  local getenv = opts.getenv or os.getenv
  local ep = endpoints.resolve({}, getenv)
  if not ep.local_sandboxd then return ep end      -- E2B's variables name one: they win
  local autostart = getenv("MOONBOX_SANDBOXD_AUTOSTART") ~= "0"
  if not autostart then
    local p, perr = M.prepare(getenv)
    if not p then return nil, perr end
    local st = M.probe(p)
    if not (st.running and st.url) then
      return nil, errors.new("E2B_CONFIG", "no E2B endpoint: set E2B_API_KEY (with E2B_DOMAIN for a self-hosted E2B, or "
        .. "E2B_API_URL and E2B_SANDBOX_URL for a sandboxd), or start a local one with `moonbox sandboxd start` "
        .. "(MOONBOX_SANDBOXD_AUTOSTART=0 keeps this command from starting it)")
    end
  end
  local info, ierr = M.start{ getenv = getenv, timeouts = opts.timeouts }
  if not info then return nil, ierr end
  if info.started then
    io.stderr:write("moonbox: started a local sandboxd (moonbox sandboxd stop ends it)\n")
  end
  return M.endpoints(info.url, info.key)
end

return M
