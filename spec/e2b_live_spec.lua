-- The owner against a real sandboxd it starts itself: local mode, teardown leaves nothing,
-- a killed sandboxd fails a running command clearly instead of hanging. Needs the built
-- sandboxd and mbwrap (MB_BUILD_DIR); tagged like the other live specs.
local compose = require "moonbox.compose"
local H = require "support.helpers"

local function no_env() return nil end
local function pid_alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true end

describe("e2b owner with its own sandboxd #sandboxd", function()
  local mb
  setup(function() mb = require "moonbox" end)

  local function open()
    local policies = compose.policies(nil)
    local ctx = { policies = policies, getenv = no_env }
    ctx.e2b = require("moonbox.e2b").new(ctx, { cwd = "/home/user/workspace", timeoutMs = 60000 })
    ctx.fs = require("moonbox.fs.e2b").new(ctx, { maxReadBytes = 1 << 20, diffBasisMaxBytes = 1 << 20 })
    ctx.subprocess = require("moonbox.subprocess.e2b").new(ctx, { frameLineMax = 40000, pipeBufferBytes = 262144 })
    return ctx
  end
  -- Runs fn(ctx) and always disposes, so a failing assertion leaves no sandboxd behind.
  local function with_owner(fn)
    return mb.run(function()
      local ctx = open()
      local res = table.pack(pcall(fn, ctx))
      ctx.subprocess:dispose()
      ctx.fs:dispose()
      ctx.e2b:dispose()
      if not res[1] then error(res[2], 0) end
      return table.unpack(res, 2, res.n)
    end)
  end

  it("starts sandboxd when no endpoint is configured and stops it at teardown", function()
    local state, pid = with_owner(function(ctx)
      local sb = assert(ctx.e2b:sandbox(60000))
      assert.truthy(ctx.e2b.endpoints.local_sandboxd)
      local d = ctx.e2b.sandboxd
      assert.truthy(d.url:match("^http://127%.0%.0%.1:%d+$"))
      local h = assert(ctx.subprocess:spawn{ argv = { "true" }, cwd = sb.cwd, graceMs = 100,
        stdio = { stdin = "ignore", stdout = "inherit", stderr = "inherit" } })
      assert(h:wait(10000))
      local pid = d.proc.pid
      assert.is_true(pid_alive(pid))
      assert(ctx.subprocess:dispose())
      assert(ctx.e2b:dispose())
      return d.state, pid
    end)
    assert.is_false(pid_alive(pid))
    local f = io.open(state .. "/state", "r")
    assert.is_nil(f)
  end)

  -- A sandboxd killed outright cannot destroy its sandboxes: their cgroups stay until the owner's
  -- dispose runs `sandboxd --clean-up` on its state dir. None is left here after these tests.
  local cgroups_before
  before_each(function() cgroups_before = H.sandboxd_cgroups() end)
  after_each(function()
    for name in pairs(H.sandboxd_cgroups()) do
      assert.is_true(cgroups_before[name], "a cgroup left: /sys/fs/cgroup/pids/" .. name)
    end
  end)

  it("fails a running command promptly when sandboxd dies mid-stream", function()
    with_owner(function(ctx)
      local sb = assert(ctx.e2b:sandbox(60000))
      -- `yes` streams without pause: the kill lands while output is flowing
      local h = assert(ctx.subprocess:spawn{ argv = { "yes" }, cwd = sb.cwd, graceMs = 100,
        stdio = { stdin = "ignore", stdout = "pipe", stderr = { maxBytes = 10 } } })
      local first = assert(h.stdout:read(30000))
      assert.truthy(first:find("y\n", 1, true))
      ctx.e2b.sandboxd.proc:kill("SIGKILL")
      local drained = 0                                 -- what was in flight, then the end
      while true do
        local c = h.stdout:read(30000)
        if not c then break end
        drained = drained + #c
      end
      local o, err = h:wait(30000)
      assert.is_nil(o)
      assert.is_not_nil(err); assert.are_not.equal("MB_TIMEOUT", err.code)
      local ok, derr = ctx.e2b:dispose()              -- the delete cannot reach sandboxd: reported, no hang
      assert.is_nil(ok); assert.truthy(derr.code:match("^E2B_"), tostring(derr))
    end)
  end)

  -- FS_IO_ERROR from a live read: the server dies while a 64 MiB text file streams.
  it("reports the transport's E2B_* error when sandboxd dies in the middle of a streamed read", function()
    with_owner(function(ctx)
      local sb = assert(ctx.e2b:sandbox(60000))
      local mk = assert(ctx.subprocess:spawn{ argv = { "/bin/sh", "-c",
        "head -c 50331648 /dev/urandom | base64 > big.txt" }, cwd = sb.cwd, graceMs = 100,
        stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 1000 } } })
      assert.are.same({ exitCode = 0 }, assert(mk:wait(60000)))
      local t = assert(ctx.fs:resolve("big.txt"))
      local it = assert(ctx.fs:streamText(t))
      local got = #assert(it.next())
      ctx.e2b.sandboxd.proc:kill("SIGKILL")
      local err
      while true do
        local c, e = it.next()
        if not c then err = e break end
        got = got + #c
      end
      assert.is_not_nil(err, "the read ended cleanly after " .. got .. " bytes")
      assert.truthy(err.code:match("^E2B_"), tostring(err))
      assert.is_true(got < 50331648 * 4 / 3)
      ctx.e2b:dispose()
    end)
  end)
end)

-- Inherit mode writes to the host's own stdout/stderr: a script run by the moonbox executable.
describe("inherit mode through the moonbox executable #sandboxd", function()
  it("puts the sandbox program's stdout and stderr on the host's", function()
    local build = os.getenv("MB_BUILD_DIR") or "build"
    local mk = assert(io.popen("mktemp -d /tmp/moonbox-inherit.XXXXXX"))
    local dir = assert(mk:read("l"))
    mk:close()
    local script = dir .. "/inherit.lua"
    local f = assert(io.open(script, "w"))
    f:write([[
local sb = assert(ctx.e2b:sandbox())
local h = assert(ctx.subprocess:spawn{ argv = { "/bin/sh", "-c", "echo inherit-out-$((6*7)); echo inherit-err-$((6*8)) >&2" },
  cwd = sb.cwd, graceMs = 500, stdio = { stdin = "ignore", stdout = "inherit", stderr = "inherit" } })
assert(assert(h:wait(30000)).exitCode == 0)
io.write("script done\n")
]])
    f:close()
    local p = assert(io.popen(build .. "/bin/moonbox run examples/demo/compose.lua " .. script
      .. " 2>" .. dir .. "/stderr; echo \"exit=$?\""))
    local out = p:read("a")
    p:close()
    local ef = assert(io.open(dir .. "/stderr", "r"))
    local err = ef:read("a")
    ef:close()
    os.execute("rm -rf '" .. dir .. "'")
    assert.matches("exit=0\n$", out)
    assert.truthy(out:find("inherit-out-42\n", 1, true), out)
    assert.truthy(out:find("script done\n", 1, true), out)
    assert.is_nil(out:find("inherit-err", 1, true))
    assert.truthy(err:find("inherit-err-48\n", 1, true), err)
    assert.is_nil(err:find("inherit-out", 1, true))
  end)
end)
