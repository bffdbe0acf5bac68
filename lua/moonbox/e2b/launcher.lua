-- moonbox.e2b.launcher — the embedded default: a local sandboxd started for one owner.
--
-- sandboxd runs as a host child process on a free loopback port (it reports the URL on its
-- stdout) with a private state directory /tmp/moonbox-sandboxd.XXXXXX and a fresh API key. The
-- directory holds a lock file that this process and sandboxd both keep locked (flock, inherited
-- by sandboxd as fd 3) for as long as either lives; --exit-with-parent makes sandboxd destroy
-- its sandboxes and exit when moonbox dies without stopping it. A directory whose lock is free
-- belongs to a dead run: every start removes those first, so a SIGKILLed run leaves nothing
-- behind for long. A sandboxd that was killed itself (it could not destroy its sandboxes) leaves
-- cgroups, and rootless its pastas, outside the directory: `sandboxd --clean-up` removes them
-- before the directory goes (at stop when it did not exit cleanly, and in the sweep). The API key goes to sandboxd on a pipe it inherits as fd 4 (--api-key-fd),
-- read once and closed: never on its command line (which every local user can read) nor in its
-- environment (which whatever it starts would inherit).
local core = require "moonbox.core"
local errors = require "moonbox.errors"
local ids = require "moonbox.ids"
local endpoints = require "moonbox.e2b.endpoints"
local proc = require "moonbox.proc"
local sched = require "moonbox.sched"
local events = require "moonbox.events"
local binaries = require "moonbox.binaries"

local M = {}
M.STATE_PREFIX = "/tmp/moonbox-sandboxd."


local function quote(s) return "'" .. s:gsub("'", "'\"'\"'") .. "'" end

local function remove_tree(dir)
  -- the state directory is ours (made by mktemp under a fixed prefix): checked before rm
  if dir:sub(1, #M.STATE_PREFIX) ~= M.STATE_PREFIX or dir:find("/", #M.STATE_PREFIX + 1, true) then
    error("launcher: refusing to remove " .. dir, 2)
  end
  os.execute("rm -rf -- " .. quote(dir))
end

M.CLEAN_UP_MS = 30000

-- What a killed sandboxd of the run in `dir` left outside it (cgroups, processes, pastas), removed
-- by `sandboxd --clean-up` (which refuses while a sandboxd still runs there). In a task.
local function clean_up(bin, dir)
  local f = bin and io.open(dir .. "/state", "r")
  if not f then return end
  f:close()
  local p = proc.spawn{ argv = { bin, "--clean-up", "--state-dir", dir .. "/state" } }
  if not p then return end
  if not p:wait(M.CLEAN_UP_MS) then p:kill("SIGKILL") p:wait(M.CLEAN_UP_MS) end
  p:close()
end

-- Removes the state directories of runs that died without cleaning up (with what their
-- sandboxd left outside them, given `bin`). → how many
function M.sweep(bin)
  local p = io.popen("ls -d -- " .. M.STATE_PREFIX .. "* 2>/dev/null")
  if not p then return 0 end
  local n = 0
  for dir in p:lines() do
    local lock = core.lock_file(dir .. "/lock")
    if lock then                      -- nobody holds it: its run is gone
      clean_up(bin, dir)
      remove_tree(dir)
      lock:release()
      n = n + 1
    end
  end
  p:close()
  return n
end

-- → handle { url, api_key, pid, state, proc, lock } | nil, err
function M.start(timeouts)
  local bin = binaries.find("MOONBOX_SANDBOXD", "sandboxd")
  if not bin then
    return nil, errors.new("E2B_SANDBOXD", "no E2B endpoint configured and no local sandboxd found "
      .. "(set E2B_API_KEY for the cloud, or MOONBOX_SANDBOXD / MB_BUILD_DIR)")
  end
  M.sweep(bin)
  local p = io.popen("mktemp -d " .. M.STATE_PREFIX .. "XXXXXX")
  local state = p and p:read("l")
  if p then p:close() end
  if not state or state == "" then return nil, errors.new("E2B_SANDBOXD", "cannot make a state directory") end
  local lock, lerr = core.lock_file(state .. "/lock")
  if not lock then
    remove_tree(state)
    return nil, errors.new("E2B_SANDBOXD", "cannot lock the state directory: " .. tostring(lerr))
  end
  local key = "e2b_" .. ids.hex(20)
  local keypipe, kerr = core.secret_pipe(key)
  if not keypipe then
    lock:release()
    remove_tree(state)
    return nil, errors.new("E2B_SANDBOXD", "cannot hand sandboxd its key: " .. tostring(kerr))
  end
  -- inherit_fds: the lock becomes sandboxd's fd 3, the key's pipe its fd 4
  local proc, err = proc.spawn{ argv = { bin, "--listen", "127.0.0.1:0", "--api-key-fd", "4",
    "--state-dir", state .. "/state", "--exit-with-parent" }, inherit_fds = { lock:fd(), keypipe:fd() } }
  keypipe:close()
  if not proc then
    lock:release()
    remove_tree(state)
    return nil, err
  end
  local d = { proc = proc, pid = proc.pid, state = state, api_key = key, log = {}, lock = lock, bin = bin }
  local found = events.event()
  -- Drain both pipes for the daemon's whole life (a full pipe would block it).
  for _, which in ipairs({ "stdout", "stderr" }) do
    sched.spawn(function()
      local buf = ""
      while true do
        local chunk = proc:read(which)
        if not chunk then break end
        if #d.log < 64 then d.log[#d.log + 1] = chunk end
        if not found.is_set then
          buf = buf .. chunk
          local url = buf:match("sandboxd listening on (http://[%d%.]+:%d+)")
          if url then found:set(url) end
          if #buf > 65536 then buf = buf:sub(-4096) end
        end
      end
      if which == "stdout" then found:set(false) end
    end)
  end
  local url = found:wait(timeouts.sandboxd_start_ms)
  if not url then
    M.stop(d, timeouts, true)
    return nil, errors.new("E2B_SANDBOXD", "local sandboxd did not start: " .. table.concat(d.log):sub(1, 2000))
  end
  d.url = url
  return d
end

-- TERM (KILL after the grace), then the state directory goes. Idempotent.
function M.stop(d, timeouts, now)
  if not d or not d.proc then return end
  local proc = d.proc
  d.proc = nil
  proc:kill(now and "SIGKILL" or "SIGTERM")
  local code, sig = proc:wait(timeouts.sandboxd_stop_grace_ms)
  if not code then
    proc:kill("SIGKILL")
    code, sig = proc:wait(timeouts.sandboxd_stop_grace_ms)
  end
  proc:close()
  -- killed (by us, or before: a crash) instead of destroying its sandboxes and exiting 0
  if code ~= 0 or sig ~= 0 then clean_up(d.bin, d.state) end
  remove_tree(d.state)
  d.lock:release()
end

return M
