-- The sandbox API on ctx.e2b and on moonbox.e2b.client, against the suite's sandboxd
-- (E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY): one request per call, the SDK's shapes, bad
-- input named, and a sandbox that was only connected to keeps nothing of ours.
local compose = require "moonbox.compose"

local function composition(extra)
  return compose.load("api.lua", { source = 'plugin "e2b" { cwd = "/home/user/workspace", timeoutMs = 120000'
    .. (extra or "") .. ' }\nplugin "fs" {}\nplugin "subprocess" {}\n' })
end

describe("the sandbox API #sandboxd", function()
  local mb
  setup(function() mb = require "moonbox" end)

  -- fn(ctx) in a started composition, always stopped.
  local function with(extra, fn)
    return mb.run(function()
      local comp = assert(composition(extra))
      local ctx, loaded = assert(compose.start(comp))
      local res = table.pack(pcall(fn, ctx))
      local ok, err = compose.stop(ctx, loaded)
      if not res[1] then error(res[2], 0) end
      assert(ok, err)
      return table.unpack(res, 2, res.n)
    end)
  end

  local function requests(fn)
    local before = mb.http.stats().requests
    local r = table.pack(fn())
    return mb.http.stats().requests - before, table.unpack(r, 1, r.n)
  end

  it("creates with the composition's options and lists by metadata, one request per call", function()
    local tag = "t" .. tostring(os.time()) .. tostring(math.random(1e6))
    with((', metadata = { run = %q, kind = "api" }, envVars = { MB_API_VAR = "v1" }, autoPause = false'):format(tag),
      function(ctx)
        local sb = assert(ctx.e2b:sandbox())
        local n, info = requests(function() return assert(ctx.e2b:info()) end)
        assert.are.equal(1, n)
        assert.are.equal(sb.id, info.sandboxId)
        assert.are.same({ run = tag, kind = "api" }, info.metadata)
        assert.are.equal("running", info.state)
        local items
        n, items = requests(function() return assert(ctx.e2b:list{ metadata = { run = tag } }) end)
        assert.are.equal(1, n)
        assert.are.equal(1, #items)
        assert.are.equal(sb.id, items[1].sandboxId)
        assert.are.same({}, assert(ctx.e2b:list{ metadata = { run = tag .. "-none" } }))
        -- envVars reach every process
        local h = assert(ctx.subprocess:spawn{ argv = { "/bin/sh", "-c", "echo $MB_API_VAR" }, cwd = sb.cwd, graceMs = 100,
          stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } } })
        assert(h:wait(10000))
        assert.are.equal("v1\n", h.collected.stdout:readFrom(0).text)
      end)
  end)

  it("pauses, reports an already paused sandbox, lists it as paused and resumes it", function()
    with(nil, function(ctx)
      local sb = assert(ctx.e2b:sandbox())
      local n, ok = requests(function() return ctx.e2b:pause() end)
      assert.are.equal(1, n)
      assert.is_true(ok)
      assert.is_false(ctx.e2b:pause())
      assert.are.equal("paused", assert(ctx.e2b:info()).state)
      local paused = assert(ctx.e2b:list{ state = "paused" })
      local found = false
      for _, it in ipairs(paused) do if it.sandboxId == sb.id then found = true end end
      assert.is_true(found)
      local r
      n, r = requests(function() return assert(ctx.e2b:resume()) end)
      assert.are.equal(1, n)
      assert.are.equal(sb.id, r.sandboxId)
      assert.is_nil(r.envdAccessToken)
      assert.are.equal("running", assert(ctx.e2b:info()).state)
      -- the sandbox works again
      local h = assert(ctx.subprocess:spawn{ argv = { "true" }, cwd = sb.cwd, graceMs = 100,
        stdio = { stdin = "ignore", stdout = { maxBytes = 10 }, stderr = { maxBytes = 10 } } })
      assert.are.same({ exitCode = 0 }, assert(h:wait(10000)))
    end)
  end)

  it("sets the lease, gives the host URL of a port, and kills by id", function()
    with(nil, function(ctx)
      local sb = assert(ctx.e2b:sandbox())
      local n = requests(function() assert(ctx.e2b:setTimeout(200000)) end)
      assert.are.equal(1, n)
      assert.are.equal(200000, ctx.e2b.config.timeoutMs)
      local url = assert(ctx.e2b:host(8080))
      assert.are.equal(("%s/_sandbox/%s/8080/"):format(os.getenv("E2B_SANDBOX_URL"), sb.id), url)
      -- a second sandbox through the client, killed by id
      local c = assert(require("moonbox.e2b").client{})
      local other = assert(ctx.e2b.api:create{ timeout_ms = 60000 })
      n = requests(function() assert.is_true(c:kill(other.id)) end)
      assert.are.equal(1, n)
      assert.is_false(c:kill(other.id))
    end)
  end)

  it("names the unknown sandbox, and refuses bad arguments", function()
    with(nil, function(ctx)
      local c = assert(require("moonbox.e2b").client{})
      for _, call in ipairs({ function() return c:info("nosuchsandbox") end,
          function() return c:pause("nosuchsandbox") end,
          function() return c:resume("nosuchsandbox") end,
          function() return c:setTimeout("nosuchsandbox", 1000) end }) do
        local r, err = call()
        assert.is_nil(r)
        assert.are.equal("E2B_NOT_FOUND", err.code)
        assert.truthy(err.message:find("nosuchsandbox", 1, true), err.message)
      end
      assert.has_error(function() c:info("") end,
        "e2b: info: sandbox id must be a non-empty string of letters, digits and '-'")
      assert.has_error(function() c:setTimeout("abc", -1) end,
        "e2b: setTimeout: timeoutMs must be a positive finite number of milliseconds")
      assert.has_error(function() c:list{ state = "gone" } end, 'e2b: list: state "gone" is not one of running, paused')
      assert.has_error(function() c:list{ metadata = { a = 1 } } end, "e2b: list: metadata must be a table of name = string")
      assert.has_error(function() ctx.e2b:host(0) end, "e2b: host: port must be an integer in 1..65535")
      assert.has_error(function() c:snapshot("abc", { name = "" }) end, "e2b: snapshot: name must be a non-empty string")
    end)
  end)

  it("refuses bad create options with the field named", function()
    local _, err = composition(", metadata = { a = 1 }")
    assert.truthy(tostring(err):find("metadata", 1, true), tostring(err))
    assert.truthy(tostring(err):find('["a"] must be a string', 1, true), tostring(err))
    _, err = composition(", autoPause = 1")
    assert.truthy(tostring(err):find("autoPause", 1, true), tostring(err))
  end)

  it("leaves no runtime root or wrapper copy in a sandbox it only connected to", function()
    local c = mb.run(function() return assert(require("moonbox.e2b").client{}) end)
    local id = mb.run(function() return assert(c.api:create{ timeout_ms = 120000 }).id end)
    local function ours(ctx)
      local sb = assert(ctx.e2b:sandbox())
      local h = assert(ctx.subprocess:spawn{ argv = { "/bin/sh", "-c", "ls -d /tmp/.moonbox-* /opt/.moonbox-* 2>/dev/null | wc -l" },
        cwd = sb.cwd, graceMs = 100, stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } } })
      assert(h:wait(10000))
      return tonumber(h.collected.stdout:readFrom(0).text)
    end
    -- three connects in a row: each sees only its own two directories
    for _ = 1, 3 do
      assert.are.equal(2, with((', sandboxId = %q'):format(id), ours))
    end
    mb.run(function()
      assert.are.equal("running", assert(c:info(id)).state)   -- connected, never deleted
      assert.is_true(c:kill(id))
    end)
  end)
end)
