-- The owner against a real sandboxd it starts itself: local mode, teardown leaves nothing,
-- a killed sandboxd fails a running command clearly instead of hanging. Needs the built
-- sandboxd and mbwrap (MB_BUILD_DIR); tagged like the other live specs.
local compose = require "moonbox.compose"

local function no_env() return nil end
local function pid_alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true end

describe("e2b owner with its own sandboxd #sandboxd", function()
  local mb
  setup(function() mb = require "moonbox" end)

  local function open()
    local policies = compose.policies(nil)
    local ctx = { policies = policies, getenv = no_env }
    ctx.e2b = require("moonbox.e2b").new(ctx, { cwd = "/home/user/workspace", timeoutMs = 60000 })
    ctx.subprocess = require("moonbox.subprocess").new(ctx, { frameLineMax = 40000, pipeQueue = 64 })
    return ctx
  end
  -- Runs fn(ctx) and always disposes, so a failing assertion leaves no sandboxd behind.
  local function with_owner(fn)
    return mb.run(function()
      local ctx = open()
      local res = table.pack(pcall(fn, ctx))
      ctx.subprocess:dispose()
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

  it("fails a running command promptly when sandboxd dies mid-stream", function()
    with_owner(function(ctx)
      local sb = assert(ctx.e2b:sandbox(60000))
      local h = assert(ctx.subprocess:spawn{ argv = { "sleep", "300" }, cwd = sb.cwd, graceMs = 100,
        stdio = { stdin = "ignore", stdout = { maxBytes = 10 }, stderr = { maxBytes = 10 } } })
      ctx.e2b.sandboxd.proc:kill("SIGKILL")
      local o, err = h:wait(30000)
      assert.is_nil(o)
      assert.is_not_nil(err); assert.are_not.equal("MB_TIMEOUT", err.code)
      local ok, derr = ctx.e2b:dispose()              -- the delete cannot reach sandboxd: reported, no hang
      assert.is_nil(ok); assert.truthy(derr.code:match("^E2B_"), tostring(derr))
    end)
  end)
end)
