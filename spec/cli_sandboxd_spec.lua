-- `moonbox sandboxd start|stop|status`, the per-user background sandboxd, and `moonbox sandbox`
-- using it when no E2B variable is set: the real program, E2B_* unset, XDG_RUNTIME_DIR a
-- directory of this spec's own. Every test leaves no daemon behind (after_each stops it, and
-- kills what a failed stop left).
local cjson = require "cjson"
local cli = require "support.cli"
local q = cli.q

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- a live process (not a zombie)?
local function alive(pid)
  local s = read("/proc/" .. pid .. "/stat")
  return s ~= nil and s:match("%)%s+(%S)") ~= "Z"
end

local function mode(path) return (sh("stat -c %a " .. q(path)):gsub("%s+$", "")) end

local function wait_until(pred, ms)
  for _ = 1, (ms or 10000) // 50 do
    if pred() then return true end
    os.execute("sleep 0.05")
  end
  return pred()
end

describe("moonbox sandboxd: the per-user background sandboxd #sandboxd", function()
  local xdg, dir, env
  local suite_url = os.getenv("E2B_API_URL")

  -- → exit status, stdout, stderr: E2B_* unset, this spec's runtime directory
  local function moonbox(args, o)
    o = o or {}
    return cli.moonbox(args, { prefix = (o.keep_e2b and "env" or cli.NO_E2B) .. " XDG_RUNTIME_DIR=" .. q(o.xdg or xdg),
      stdin_null = true })
  end
  local function record_pid() return math.tointeger(tonumber((read(dir .. "/pid") or ""):match("^(%d+)"))) end
  local function key() return (read(dir .. "/api-key") or ""):match("^(e2b_%x+)") end
  -- the processes whose command line names `text`
  local function processes_with(text)
    local found = {}
    for pid in sh("ls /proc"):gmatch("%d+") do
      local c = read("/proc/" .. pid .. "/cmdline")
      if c and c:gsub("%z", " "):find(text, 1, true) then found[#found + 1] = tonumber(pid) end
    end
    return found
  end

  setup(function()
    xdg = cli.tmpdir()
    dir = xdg .. "/moonbox/sandboxd"
  end)
  after_each(function()
    local pid = record_pid()
    moonbox("sandboxd stop")
    -- a stop that failed: nothing may outlive the test
    if pid and alive(pid) then os.execute("kill -9 " .. pid) end
    for _, p in ipairs(processes_with(dir .. "/")) do os.execute("kill -9 " .. p) end
  end)
  teardown(function() os.execute("rm -rf " .. q(xdg)) end)

  it("status with nothing running: not running, exit 3; the directory is made private", function()
    local code, out, err = moonbox("sandboxd status")
    assert.are.same({ 3, "" }, { code, err })
    assert.are.equal(("sandboxd: not running\ndirectory:  %s\n"):format(dir), out)
    assert.are.equal("700", mode(xdg .. "/moonbox"))
    assert.are.equal("700", mode(dir))
    code, out = moonbox("sandboxd status --json")
    assert.are.same({ 3, { running = false, dir = dir } }, { code, cjson.decode(out) })
  end)

  it("start detaches a sandboxd on a loopback port and waits until it listens; a second start says so", function()
    local code, out, err = moonbox("sandboxd start")
    assert.are.equal(0, code, err)
    local pid, url = out:match("^started sandboxd %(pid (%d+)%) at (http://127%.0%.0%.1:%d+); its files: " .. dir:gsub("%p", "%%%0") .. "\n$")
    assert.truthy(pid, out)
    pid = tonumber(pid)
    assert.is_true(alive(pid))
    assert.are.equal(url .. "\n", read(dir .. "/url"))
    -- detached: not moonbox's child (moonbox has exited), a session of its own, stdio in the log
    local function fields(p)
      local t = {}
      for w in read("/proc/" .. p .. "/stat"):match("%)%s+(.*)$"):gmatch("%S+") do t[#t + 1] = w end
      return t
    end
    local f = fields(pid)
    assert.falsy(sh("readlink /proc/" .. f[2] .. "/exe"):find("/moonbox\n", 1, true), "its parent is not moonbox")
    assert.are_not.equal(fields("self")[4], f[4], "its own session")
    assert.truthy(sh("readlink /proc/" .. pid .. "/fd/1"):find(dir .. "/sandboxd.log", 1, true))
    assert.truthy(read(dir .. "/sandboxd.log"):find("sandboxd listening on " .. url, 1, true))
    -- the key: a private file, named to sandboxd by path
    assert.are.equal("600", mode(dir .. "/api-key"))
    assert.truthy(key())
    assert.truthy(read("/proc/" .. pid .. "/cmdline"):find("--api-key-file\0" .. dir .. "/api-key", 1, true))
    code, out, err = moonbox("sandboxd status")
    assert.are.same({ 0, "" }, { code, err })
    assert.are.equal(("sandboxd: running\npid:        %d\nurl:        %s\ndirectory:  %s\nsandboxes:  0\n"):format(pid, url, dir), out)
    code, out = moonbox("sandboxd status --json")
    assert.are.same({ 0, { running = true, pid = pid, url = url, dir = dir, sandboxes = 0 } }, { code, cjson.decode(out) })
    code, out, err = moonbox("sandboxd start")
    assert.are.same({ 0, ("sandboxd is already running (pid %d) at %s\n"):format(pid, url), "" }, { code, out, err })
    assert.are.equal(pid, record_pid())
  end)

  it("sandbox create, list and kill use it with nothing set (started on first use); the key is on no command line", function()
    assert.are.equal(3, (moonbox("sandboxd status")))
    local code, out, err = moonbox("sandbox create --timeout 5m --metadata spec=bg --json")
    assert.are.equal(0, code, err)
    assert.are.equal("moonbox: started a local sandboxd (moonbox sandboxd stop ends it)\n", err)
    local id = cjson.decode(out).sandboxId
    assert.truthy(id)
    local pid = record_pid()
    assert.is_true(alive(pid))
    code, out, err = moonbox("sandbox list --metadata spec=bg")
    assert.are.same({ 0, "" }, { code, err }, "the second command finds it running: nothing said")
    assert.truthy(out:find("\n" .. id .. " ", 1, true), out)
    code, out = moonbox("sandboxd status --json")
    assert.are.same({ 0, 1, pid }, { code, cjson.decode(out).sandboxes, cjson.decode(out).pid })
    code, out, err = moonbox("sandbox exec " .. id .. " -- echo hi")
    assert.are.same({ 0, "hi\n", "" }, { code, out, err })
    -- the key: on no process's command line, in no environment but its file
    local k = assert(key())
    assert.are.same({}, processes_with(k))
    for p in sh("ls /proc"):gmatch("%d+") do
      local e = read("/proc/" .. p .. "/environ")
      assert.falsy(e and e:find(k, 1, true), "the key in the environment of pid " .. p)
    end
    -- explicit E2B variables win: the suite's sandboxd does not have it
    if suite_url then
      code, out, err = moonbox("sandbox list --metadata spec=bg", { keep_e2b = true })
      assert.are.same({ 0, "" }, { code, err })
      assert.falsy(out:find(id, 1, true), out)
    end
    code, out, err = moonbox("sandbox kill " .. id)
    assert.are.same({ 0, "killed " .. id .. "\n", "" }, { code, out, err })
    code, out = moonbox("sandbox list --metadata spec=bg --json")
    assert.are.same({ 0, {} }, { code, cjson.decode(out) })
    -- with autostart off and none running: the command says how to get an endpoint
    assert.are.equal(0, (moonbox("sandboxd stop")))
    code, out, err = cli.moonbox("sandbox list", { prefix = cli.NO_E2B .. " MOONBOX_SANDBOXD_AUTOSTART=0 XDG_RUNTIME_DIR=" .. q(xdg) })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("^moonbox: E2B_CONFIG: no E2B endpoint: .*moonbox sandboxd start"), err)
    assert.are.equal(3, (moonbox("sandboxd status")))
  end)

  it("refuses a directory others could change: group or world writable, a symbolic link, another user's", function()
    local bad = cli.tmpdir()
    local function refused(pattern)
      for _, cmd in ipairs({ "sandboxd start", "sandboxd status", "sandbox list" }) do
        local code, out, err = moonbox(cmd, { xdg = bad })
        assert.are.same({ 1, "" }, { code, out }, cmd)
        assert.truthy(err:find("^moonbox: E2B_SANDBOXD: " .. pattern), cmd .. ": " .. err)
        assert.falsy(err:find("started", 1, true), err)
      end
      assert.is_nil(read(bad .. "/moonbox/sandboxd/pid"), "nothing started")
      assert.is_nil(read(bad .. "/moonbox/sandboxd/api-key"), "no key written")
    end
    local ok, e = pcall(function()
      os.execute("mkdir -p " .. q(bad .. "/moonbox/sandboxd") .. " && chmod 700 " .. q(bad .. "/moonbox"))
      os.execute("chmod 777 " .. q(bad .. "/moonbox/sandboxd"))
      refused(".*/moonbox/sandboxd is writable by others %(mode 0777%): refusing to keep sandboxd's key there; chmod 700 ")
      os.execute("chmod 770 " .. q(bad .. "/moonbox/sandboxd"))
      refused(".*/moonbox/sandboxd is writable by its group %(mode 0770%)")
      os.execute("chmod 700 " .. q(bad .. "/moonbox/sandboxd") .. " && chmod 757 " .. q(bad .. "/moonbox"))
      refused(".*/moonbox is writable by others")
      os.execute("chmod 700 " .. q(bad .. "/moonbox") .. " && rmdir " .. q(bad .. "/moonbox/sandboxd") .. " && mkdir -m 700 "
        .. q(bad .. "/elsewhere") .. " && ln -s ../elsewhere " .. q(bad .. "/moonbox/sandboxd"))
      refused(".*/moonbox/sandboxd is not a directory %(a symbolic link%)")
      if sh("id -u"):match("^0\n") then
        os.execute("rm " .. q(bad .. "/moonbox/sandboxd") .. " && mkdir -m 700 " .. q(bad .. "/moonbox/sandboxd")
          .. " && chown 65534 " .. q(bad .. "/moonbox/sandboxd"))
        refused(".*/moonbox/sandboxd belongs to uid 65534, not to you %(uid 0%)")
      end
    end)
    -- a refusal that did not happen may have started one there: it goes too
    os.execute("chmod -R u+w,go-w " .. q(bad) .. " 2>/dev/null; chown -R \"$(id -u)\" " .. q(bad) .. " 2>/dev/null")
    moonbox("sandboxd stop", { xdg = bad })
    for _, p in ipairs(processes_with(bad .. "/")) do os.execute("kill -9 " .. p) end
    os.execute("rm -rf " .. q(bad))
    assert(ok, e)
  end)

  it("a stale record (its sandboxd killed, or its pid now another program's) is detected and replaced", function()
    local code, out, err = moonbox("sandboxd start")
    assert.are.equal(0, code, err)
    local old = record_pid()
    os.execute("kill -9 " .. old)
    assert.is_true(wait_until(function() return not alive(old) end))
    code, out = moonbox("sandboxd status")
    assert.are.equal(3, code)
    assert.truthy(out:find(("^sandboxd: not running %%(a stale record: pid %d is gone%%)\n"):format(old)), out)
    code, out, err = moonbox("sandboxd start")
    assert.are.equal(0, code, err)
    local new = record_pid()
    assert.truthy(out:find(("^removed a stale record %%(pid %d is gone%%)\nstarted sandboxd %%(pid %d%%) at http://"):format(old, new)), out)
    assert.are_not.equal(old, new)
    code, out = moonbox("sandboxd status --json")
    assert.are.same({ 0, true, new }, { code, cjson.decode(out).running, cjson.decode(out).pid })
    -- the new one works: a sandbox through it
    code, out, err = moonbox("sandbox create --json")
    assert.are.same({ 0, "" }, { code, err })
    assert.truthy(cjson.decode(out).sandboxId)
    assert.are.equal(0, (moonbox("sandboxd stop")))
    -- a record naming a live process that is not sandboxd (a reused pid)
    local sleeper = assert(io.popen("sleep 60 & echo $!")):read("l")
    assert.is_true(wait_until(function()   -- forked is not yet exec'd: /proc/<pid>/exe names sleep once it is
      return (sh("readlink /proc/" .. sleeper .. "/exe") or ""):find("sleep") ~= nil
    end))
    local start = read("/proc/" .. sleeper .. "/stat"):match("%)%s+(.*)$")
    local f = {}
    for w in start:gmatch("%S+") do f[#f + 1] = w end
    cli.write(dir .. "/pid", ("%s %s\n"):format(sleeper, f[20]))
    cli.write(dir .. "/url", "http://127.0.0.1:1\n")
    local ok, e = pcall(function()
      code, out = moonbox("sandboxd status")
      assert.are.equal(3, code)
      assert.truthy(out:find(("^sandboxd: not running %%(a stale record: pid %s is now another program %%([^)]*sleep%%)%%)\n"):format(sleeper)), out)
      code, out, err = moonbox("sandboxd start")
      assert.are.equal(0, code, err)
      assert.truthy(out:find(("^removed a stale record %%(pid %s is now another program"):format(sleeper)), out)
      assert.is_true(alive(tonumber(sleeper)), "the other program is left alone")
      assert.are_not.equal(tonumber(sleeper), record_pid())
      -- and a record whose pid lives with another start time: the same
      assert.are.equal(0, (moonbox("sandboxd stop")))
      cli.write(dir .. "/pid", ("%s 1\n"):format(sleeper))
      code, out = moonbox("sandboxd stop")
      assert.are.same({ 0, ("sandboxd is not running; removed a stale record (pid %s is now another process)\n"):format(sleeper) }, { code, out })
      assert.is_nil(read(dir .. "/pid"))
      assert.is_true(alive(tonumber(sleeper)), "stop never signals a process it did not start")
    end)
    os.execute("kill " .. sleeper)
    assert(ok, e)
  end)

  it("stop ends it and the sandboxes it made; nothing is left running, the lock is free", function()
    local code, out, err = moonbox("sandboxd start")
    assert.are.equal(0, code, err)
    local pid = record_pid()
    for _ = 1, 2 do
      code, out, err = moonbox("sandbox create --timeout 10m")
      assert.are.equal(0, code, err)
    end
    local id = out:match("^(%S+)\n$")
    assert.truthy(id, out)
    code, out, err = moonbox("sandboxd stop")
    assert.are.equal(0, code, err)
    assert.truthy(out:find(("^stopped sandboxd %%(pid %d%%): 2 sandboxes destroyed, in [%%d.]+ s\n$"):format(pid)), out)
    assert.is_false(alive(pid))
    assert.are.same({}, processes_with(dir .. "/"))
    assert.truthy(read(dir .. "/sandboxd.log"):find("destroying every sandbox", 1, true))
    assert.is_true(os.execute("flock -n " .. q(dir .. "/lock") .. " true"), "the lock is free")
    assert.is_nil(read(dir .. "/pid"))
    assert.is_nil(read(dir .. "/url"))
    code, out, err = moonbox("sandboxd status")
    assert.are.same({ 3, "" }, { code, err })
    assert.truthy(out:find("^sandboxd: not running\n"), out)
    code, out, err = moonbox("sandboxd stop")
    assert.are.same({ 0, "sandboxd is not running\n", "" }, { code, out, err })
    -- the key and the state stay for the next start (its secret store with them)
    assert.truthy(key())
  end)

  it("sync, and run --background-sandboxd, reach a sandbox of sandbox create with nothing set", function()
    local work = cli.tmpdir()
    local ok, e = pcall(function()
      local code, out, err = moonbox("sandbox create --timeout 5m")
      assert.are.equal(0, code, err)
      local id = out:match("^(%S+)\n$")
      cli.write(work .. "/ws.lua", ('plugin "e2b" { sandboxId = %q }\nplugin "fs" {}\nplugin "subprocess" {}\nplugin "workspace" {}\n'):format(id))
      os.execute("mkdir -p " .. q(work .. "/proj") .. " && printf one > " .. q(work .. "/proj/a.txt"))
      code, out, err = moonbox(("sync push --compose %s %s /home/user/proj"):format(q(work .. "/ws.lua"), q(work .. "/proj")))
      assert.are.equal(0, code, err)
      assert.truthy(out:find("^pushed "), out)
      cli.write(work .. "/s.lua", 'local t = assert(ctx.fs:resolve("/home/user/proj/a.txt"))\n'
        .. 'assert(ctx.fs:writeText(t, "two"))\nprint(ctx.e2b.sandboxd == nil)\n')
      code, out, err = moonbox(("run --background-sandboxd %s %s"):format(q(work .. "/ws.lua"), q(work .. "/s.lua")))
      assert.are.same({ 0, "true\n" }, { code, out }, err)
      code, out, err = moonbox(("sync pull --compose %s /home/user/proj %s"):format(q(work .. "/ws.lua"), q(work .. "/proj")))
      assert.are.equal(0, code, err)
      assert.are.equal("two", read(work .. "/proj/a.txt"))
      -- without the flag a run embeds a sandboxd of its own, which cannot know that sandbox
      code, _, err = moonbox(("run %s %s"):format(q(work .. "/ws.lua"), q(work .. "/s.lua")))
      assert.are.equal(1, code)
      assert.truthy(err:find("use `moonbox run --background-sandboxd`", 1, true), err)
    end)
    os.execute("rm -rf " .. q(work))
    assert(ok, e)
  end)

  it("usage: --help lists start, stop and status; a mistake is one line, exit 2", function()
    local code, out, err = moonbox("sandboxd --help")
    assert.are.same({ 0, "" }, { code, err })
    assert.truthy(out:find("^usage: moonbox sandboxd COMMAND %[ARGS%.%.%.%]\n"), out)
    for _, sub in ipairs({ "start", "stop", "status" }) do assert.truthy(out:match("\n  " .. sub .. " +%u[^\n]+\n"), out) end
    code, out, err = moonbox("sandboxd strat")
    assert.are.same({ 2, "", "moonbox: sandboxd: unknown subcommand strat (did you mean start?); run 'moonbox sandboxd --help' for usage\n" },
      { code, out, err })
    code, out, err = moonbox("sandboxd stop now")
    assert.are.same({ 2, "", "moonbox: sandboxd stop: unexpected argument now; run 'moonbox sandboxd stop --help' for usage\n" },
      { code, out, err })
    code, out, err = moonbox("sandboxd status --jsn")
    assert.are.same({ 2, "" }, { code, out })
    assert.truthy(err:find("unknown option --jsn (did you mean --json?)", 1, true), err)
    -- sandboxd's own options still run sandboxd itself
    code, out = moonbox("sandboxd --version")
    assert.are.equal(0, code)
    assert.truthy(out:find("^sandboxd "), out)
    assert.is_nil(read(dir .. "/pid"), "nothing started")
  end)
end)
