-- Faults, as a user meets them: the server killed under running calls, the sandbox deleted
-- under a command and a write, `moonbox run` interrupted by signals (with the embedded sandboxd
-- and with an external one), a run killed outright, a consumer that stops reading a flood.
-- Each runs real processes (the moonbox program, private sandboxds); nothing here asserts how
-- fast something happens, only what happens (latencies are printed).
local mb = require "moonbox"
local cjson = require "cjson"
local H = require "spec.support.helpers"

local BUILD = os.getenv("MB_BUILD_DIR") or "build"
local MOONBOX = BUILD .. "/bin/moonbox"
local SCRIPT = H.dir .. "/fault_script.lua"
local DEMO = "examples/demo/compose.lua"

local function alive(pid)                         -- a zombie counts as gone
  local f = io.open("/proc/" .. pid .. "/stat", "r")
  if not f then return false end
  local st = f:read("a"); f:close()
  return st:match("^%d+ %b() (%a)") ~= "Z"
end
-- Processes whose command line has `--state-dir <dir>` (a sandboxd of that state directory).
local function sandboxds_of(dir)
  local found = {}
  local ls = io.popen("ls /proc")
  for pid in ls:lines() do
    if pid:match("^%d+$") then
      local f = io.open("/proc/" .. pid .. "/cmdline", "rb")
      local cmd = f and f:read("a") or ""
      if f then f:close() end
      if cmd:find("--state-dir\0" .. dir .. "/state", 1, true) and alive(pid) then found[#found + 1] = pid end
    end
  end
  ls:close()
  return found
end
local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

-- Starts `moonbox run <compose> fault_script.lua <mode>` with env; → proc, first stdout line.
local function start_run(mode, env)
  local e = { PATH = os.getenv("PATH"), MB_BUILD_DIR = BUILD, MOONBOX_HOME = os.getenv("PWD") or "." }
  for k, v in pairs(env or {}) do e[k] = v end
  local p = assert(mb.proc.spawn{ argv = { MOONBOX, "run", DEMO, SCRIPT, mode }, env = e })
  local buf = ""
  while not buf:find("\n", 1, true) do
    local c = p:read("stdout", 60000)
    if not c then break end
    buf = buf .. c
  end
  return p, buf
end

-- The rest of a process's stdout and its exit.
local function finish(p)
  local out = {}
  while true do local c = p:read("stdout", 60000) if not c then break end out[#out + 1] = c end
  local errs = {}
  while true do local c = p:read("stderr", 1000) if not c then break end errs[#errs + 1] = c end
  local code, sig = p:wait(60000)
  p:close()
  return table.concat(out), code, sig, table.concat(errs)
end

describe("faults #sandboxd #fault", function()
  describe("signals to moonbox run", function()
    for _, case in ipairs({ { "SIGTERM", 143 }, { "SIGINT", 130 } }) do
      it(case[1] .. " with the embedded sandboxd: sandbox and sandboxd gone, state directory removed, exit "
          .. case[2], function()
        H.run(function()
          local p, line = start_run("wait", {})
          local id, state = line:match("^ready (%S+) (%S+)\n")
          assert.truthy(state and state ~= "-", line)
          assert.is_true(exists(state .. "/lock"))
          p:kill(case[1])
          local _, code, _, errs = finish(p)
          assert.are.equal(case[2], code, errs)
          assert.truthy(errs:find(case[1] .. ": the composition was disposed\n", 1, true), errs)
          assert.is_false(exists(state .. "/lock"), "state directory left: " .. state)
          assert.are.same({}, sandboxds_of(state), "sandboxd still running for " .. id)
        end, 90000)
      end)
    end

    it("SIGTERM with an external sandboxd: the sandbox is deleted, exit 143", function()
      local d = H.start_sandboxd()
      local ok, err = pcall(H.run, function()
        local p, line = start_run("wait", { E2B_API_URL = d.url, E2B_SANDBOX_URL = d.url, E2B_API_KEY = d.key })
        local id = line:match("^ready (%S+) %-\n")
        assert.truthy(id, line)
        local api = require("moonbox.e2b.api").new{ url = d.url, api_key = d.key }
        assert(api:get(id))
        p:kill("SIGTERM")
        local _, code, _, errs = finish(p)
        assert.are.equal(143, code, errs)
        local info, gerr = api:get(id)
        assert.is_nil(info)
        assert.are.equal("E2B_NOT_FOUND", gerr.code)
      end, 90000)
      H.stop_sandboxd(d)
      assert(ok, err)
    end)

    it("after a SIGKILL of moonbox run, the next run removes what the dead one left", function()
      H.run(function()
        local p, line = start_run("wait", {})
        local state = line:match("^ready %S+ (%S+)\n")
        assert.truthy(state and state ~= "-", line)
        p:kill("SIGKILL")
        finish(p)
        assert.is_true(exists(state .. "/lock"))        -- nobody could clean up
        -- its sandboxd follows it (--exit-with-parent) and holds the lock until it is gone
        for _ = 1, 600 do
          if #sandboxds_of(state) == 0 then break end
          mb.sleep(50)
        end
        local q, qline = start_run("wait", {})          -- the next run sweeps it at start
        assert.truthy(qline:match("^ready "), qline)
        assert.is_false(exists(state .. "/lock"), "left behind: " .. state)
        q:kill("SIGTERM")
        local _, code = finish(q)
        assert.are.equal(143, code)
      end, 120000)
    end)
  end)

  it("sandboxd killed under a streaming command, a write and a terminal: every blocked call gets an E2B_* error and moonbox exits; a restart cleans up", function()
    local cgroups_before = H.sandboxd_cgroups()
    local d = H.start_sandboxd()
    local ok, err = pcall(H.run, function()
      local p = assert(mb.proc.spawn{ argv = { MOONBOX, "run", DEMO, SCRIPT, "kill-sandboxd" },
        env = { PATH = os.getenv("PATH"), MB_BUILD_DIR = BUILD, MOONBOX_HOME = os.getenv("PWD") or ".",
          E2B_API_URL = d.url, E2B_SANDBOX_URL = d.url, E2B_API_KEY = d.key, MB_FAULT_SANDBOXD_PID = tostring(d.pid) } })
      local out, code, _, errs = finish(p)        -- it exits by itself
      local seen = {}
      for what, c, ms in out:gmatch("(%a+) (%S+) (%d+)\n") do
        seen[what] = c
        print(("     %s: %s %s ms after the kill"):format(what, c, ms))
        -- far below the 150 s stream idle limit: the connection's end itself was noticed
        assert.is_true(tonumber(ms) < 30000, what .. " took " .. ms .. " ms")
      end
      for _, what in ipairs({ "command", "terminal", "write" }) do
        assert.truthy(seen[what] and seen[what]:match("^E2B_"), what .. ": " .. tostring(seen[what]) .. "\n" .. out .. errs)
      end
      assert.is_number(code)
    end, 180000)
    -- What the crash left (the sandbox's cgroups and directories) goes when a sandboxd starts
    -- again on its state dir: nothing of it is left once that one stops.
    local again = H.start_sandboxd{ state = d.state }
    H.stop_sandboxd(again)   -- (removes the shared state dir: after it, d is only reaped)
    H.stop_sandboxd(d)
    assert(ok, err)
    for name in pairs(H.sandboxd_cgroups()) do
      assert.is_true(cgroups_before[name], "a cgroup left after the restart: /sys/fs/cgroup/pids/" .. name)
    end
  end)

  describe("the sandbox deleted under running calls", function()
    local ctx, loaded, api, sb
    before_each(function()
      H.run(function()
        local compose = require "moonbox.compose"
        local comp = assert(compose.load("fault.lua", { source = 'plugin "e2b" {}\nplugin "fs" {}\nplugin "subprocess" {}\n' }))
        ctx, loaded = assert(compose.start(comp))
        sb = assert(ctx.e2b:sandbox())
        api = ctx.e2b.api
      end, 60000)
    end)
    after_each(function() H.run(function() require("moonbox.compose").stop(ctx, loaded) end, 60000) end)

    it("a running command reports E2B_SANDBOX_GONE", function()
      local err = H.run(function()
        local h = assert(ctx.subprocess:spawn{ argv = { "sleep", "300" }, cwd = sb.cwd, graceMs = 100,
          stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } } })
        assert(api:delete(sb.id))
        local _, e = h:wait(60000)
        return e
      end, 90000)
      assert.are.equal("E2B_SANDBOX_GONE", err and err.code, tostring(err))
      assert.truthy(err.message:find(sb.id, 1, true))
    end)

    it("a watcher reports E2B_SANDBOX_GONE and leaves no watch process", function()
      -- live `mbwrap watch -r <dir>` processes (sandboxd's sandboxes are this host's processes)
      local function watch_procs(dir)
        local found = {}
        for pid in io.popen("ls /proc"):lines() do
          local f = pid:match("^%d+$") and io.open("/proc/" .. pid .. "/cmdline", "rb")
          local cmd = f and f:read("a") or ""
          if f then f:close() end
          if cmd:find("watch\0-r\0" .. dir .. "\0", 1, true) and alive(pid) then found[#found + 1] = pid end
        end
        return found
      end
      local err, dir, before = H.run(function()
        local t = assert(ctx.fs:resolve("watched-" .. sb.id))
        assert(ctx.fs:mkdir(t))
        local w = assert(ctx.fs:watch(t, { recursive = true }))
        local n = #watch_procs(t.targetKey)
        assert(api:delete(sb.id))
        local ev, e
        repeat ev, e = w:next(60000) until not ev
        w:close()
        return e, t.targetKey, n
      end, 90000)
      assert.are.equal("E2B_SANDBOX_GONE", err and err.code, tostring(err))
      assert.are.equal(1, before)
      assert.are.same({}, watch_procs(dir))
    end)

    it("a write in flight reports E2B_SANDBOX_GONE", function()
      local err = H.run(function()
        local t = assert(ctx.fs:resolve("big.txt"))
        local res = {}
        local w = mb.spawn(function() res.r, res.err = ctx.fs:writeText(t, ("y"):rep(384 * 1024 * 1024)) end) -- under sandboxd's 512 MiB body limit
        while mb.http.stats().active == 0 and not w:done() do mb.sleep(1) end
        assert(api:delete(sb.id))
        assert(w:join(120000))
        return res.err
      end, 180000)
      assert.are.equal("E2B_SANDBOX_GONE", err and err.code, tostring(err))
    end)
  end)

  it("a consumer that stops reading a 1 GiB pipe-mode flood: bounded host memory, the loop keeps running", function()
    local P = require "seam.provider"
    local s = P.open()
    local rss0, rss_max, ticks = nil, 0, 0
    P.run(function()
      local core = require "moonbox.core"
      collectgarbage()
      rss0 = core.rss_bytes()
      local h = assert(s.ctx.subprocess:spawn{ argv = { "/bin/sh", "-c", "head -c 1073741824 /dev/zero" },
        cwd = s.cwd, graceMs = 200, stdio = { stdin = "ignore", stdout = "pipe", stderr = { maxBytes = 100 } } })
      assert(h.stdout:read(30000))
      local ticker = mb.spawn(function() while true do mb.sleep(100) ticks = ticks + 1 end end)
      local t0 = mb.now()
      while mb.now() - t0 < 10000 do                  -- nobody reads for 10 s
        mb.sleep(500)
        local r = core.rss_bytes()
        if r > rss_max then rss_max = r end
      end
      ticker:cancel()
      assert(h:terminate())
      assert(h:wait(30000))
    end, 120000)
    local over = (rss_max - rss0) / (1024 * 1024)
    print(("     RSS over baseline while the flood waited: %.2f MiB; %d timer ticks in 10 s"):format(over, ticks))
    assert.is_true(over < 16, ("%.2f MiB over baseline"):format(over))
    assert.is_true(ticks > 0)
  end)
end)
