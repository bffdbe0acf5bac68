-- Spec helpers: drive the loop with a deadline, start the test HTTP server.
-- busted has no async tests: each spec calls H.run(fn), which runs fn as a task under mb.run
-- and raises if it does not finish within the deadline.
local mb = require "moonbox"

local H = {}
H.dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "spec/support"

-- Runs fn(...) in a task; returns its results; raises its error or a deadline error.
function H.run(fn, deadline_ms)
  deadline_ms = deadline_ms or 10000
  return mb.run(function()
    local t = mb.spawn(fn)
    local res = table.pack(t:join(deadline_ms))
    if res[1] then return table.unpack(res, 2, res.n) end
    t:cancel()
    local e = res[2]
    if e and e.code == "MB_TASK_FAILED" then error(e.message, 0) end
    error(e, 0)
  end)
end

-- Starts spec/support/server.py (or another script of spec/support that prints "listening
-- PORT") on a free port; returns {url=, port=, proc=}.
function H.start_server(script, args)
  return H.run(function()
    local argv = { "python3", H.dir .. "/" .. (script or "server.py") }
    for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
    local p = assert(mb.proc.spawn{ argv = argv })
    local buf = ""
    while not buf:find("\n") do
      local data, err = p:read("stdout", 10000)
      if not data then
        p:kill("KILL")
        local e = p:read("stderr", 1000)
        error("test server did not start: " .. tostring(err or "exited") .. " " .. tostring(e))
      end
      buf = buf .. data
    end
    local port = assert(tonumber(buf:match("listening (%d+)")), "bad server banner: " .. buf)
    return { url = "http://127.0.0.1:" .. port, port = port, proc = p }
  end)
end

function H.stop_server(s)
  if not s then return end
  H.run(function()
    s.proc:kill("KILL")
    s.proc:wait(5000)
    s.proc:close()
  end)
end

-- A private sandboxd (logs in its state directory); → { url, key, pid, proc, state } (and, with a
-- TLS listener among opts.args, https and tls_port). opts: args (more arguments: e.g. edge mode's
-- --tls-listen/--domain), env ("NAME=VALUE" strings for its environment), state (the `state` of
-- an earlier one, stopped or crashed: this one starts on its state dir, and cleans up after it).
function H.start_sandboxd(opts)
  opts = opts or {}
  local build = os.getenv("MB_BUILD_DIR") or "build"
  local state = opts.state or assert(io.popen("mktemp -d /tmp/moonbox-spec-sbxd.XXXXXX")):read("l")
  os.remove(state .. "/log")   -- an earlier one's "listening" line must not be taken for this one's
  local key = "e2b_" .. ("%040x"):format(os.time())
  local extra = ""
  for _, a in ipairs(opts.args or {}) do extra = extra .. " '" .. a:gsub("'", "'\\''") .. "'" end
  local env = ""
  for _, e in ipairs(opts.env or {}) do env = env .. " '" .. e:gsub("'", "'\\''") .. "'" end
  return H.run(function()
    -- the key on a pipe that sh and then sandboxd inherit as fd 3: never on a command line
    local kp = assert(require("moonbox.core").secret_pipe(key))
    local p = assert(mb.proc.spawn{ argv = { "/bin/sh", "-c",
      'exec env' .. env .. ' "$0" --listen 127.0.0.1:0 --api-key-fd 3 --state-dir "$1/state" --exit-with-parent' .. extra
        .. ' >"$1/log" 2>&1', build .. "/bin/sandboxd", state }, inherit_fds = { kp:fd() } })
    kp:close()
    local url, https, text
    for _ = 1, 200 do
      local f = io.open(state .. "/log", "r")
      text = f and f:read("a") or ""
      if f then f:close() end
      url = text:match("sandboxd listening on (http://[%d%.]+:%d+)")
      https = text:match("sandboxd listening on (https://[%d%.]+:%d+)")
      if url and (https or not extra:find("--tls-listen", 1, true)) then break end
      mb.sleep(50)
    end
    assert(url, "sandboxd did not start (see " .. state .. "/log): " .. tostring(text))
    return { url = url, https = https, tls_port = https and tonumber(https:match(":(%d+)$")), key = key, pid = p.pid,
      proc = p, state = state }
  end, 20000)
end

-- The cgroup v1 directories sandboxds have made here (sandboxd-<hash of a state dir> under the
-- pids hierarchy), as a set; {} where there is none.
function H.sandboxd_cgroups()
  local set = {}
  local ls = io.popen("ls /sys/fs/cgroup/pids 2>/dev/null")
  for name in ls:lines() do if name:match("^sandboxd%-") then set[name] = true end end
  ls:close()
  return set
end

function H.stop_sandboxd(d)
  H.run(function()
    d.proc:kill("SIGTERM")
    if not d.proc:wait(10000) then d.proc:kill("SIGKILL") d.proc:wait(5000) end
    d.proc:close()
  end, 30000)
  os.execute("rm -rf '" .. d.state .. "'")
end

function H.start_networld()
  local p
  local ok, world = pcall(H.run, function()
    local dir = assert(io.popen("mktemp -d /tmp/moonbox-networld.XXXXXX")):read("l")
    p = assert(mb.proc.spawn{ argv = { "python3", H.dir .. "/networld.py", dir, "--until-signal" } })
    local buf = ""
    while not buf:find("\n") do
      local data, err = p:read("stdout", 30000)
      if not data then error("networld did not start: " .. tostring(err or "exited")) end
      buf = buf .. data
    end
    local w = require("cjson").decode(buf:match("^[^\n]*"))
    if w.error then error("networld: " .. w.error) end
    return w
  end, 40000)
  if not ok then
    if p then H.run(function() p:kill("KILL") p:wait(5000) p:close() end) end
    return nil, world
  end
  world.stop = function()
    H.run(function()
      p:kill("TERM")             -- networld removes its namespace
      if not p:wait(10000) then p:kill("KILL") p:wait(5000) end
      p:close()
    end, 20000)
  end
  return world
end


return H
