-- The same providers against E2B's cloud. Runs only when E2B_API_KEY is set and E2B_API_URL is
-- not (the local sandboxd runs set both); otherwise it is reported pending. Endpoints are the
-- SDK defaults for that key (E2B_DOMAIN is honoured).
local compose = require "moonbox.compose"

local function set(name) local v = os.getenv(name) return v ~= nil and v ~= "" end
local CLOUD = set("E2B_API_KEY") and not set("E2B_API_URL")

describe("e2b providers on E2B's cloud #cloud", function()
  if not CLOUD then
    pending("E2B's cloud: set E2B_API_KEY (and leave E2B_API_URL unset) to run")
    return
  end
  local key = os.getenv("E2B_API_KEY")
  local function getenv(name)
    if name == "E2B_API_URL" or name == "E2B_SANDBOX_URL" then return nil end
    return os.getenv(name)
  end

  -- The README's demo, unchanged, on the cloud: only E2B_API_KEY is set. The same lines as
  -- spec/demo_spec.lua except the epilogue, which there reports the sandbox deleted in the cloud.
  it("runs the demo composition unchanged", function()
    local build = os.getenv("MB_BUILD_DIR") or "build"
    local cmd = "env -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_DOMAIN -u MOONBOX_SANDBOXD "
      .. build .. "/bin/moonbox run examples/demo/compose.lua examples/demo/demo.lua 2>&1; echo \"exit=$?\""
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    assert.matches("exit=0\n$", out)
    local id = out:match("sandbox (%w+) ready")
    assert.truthy(id, out)
    if out:find("no C compiler in this sandbox template", 1, true) then
      assert.matches("inspect: exit 0", out)           -- the demo's fallback for a template without cc
    else
      assert.matches("compile: exit 0", out)
      assert.matches("| hello 3 from the sandbox", out, 1, true)
      assert.matches("| goodbye 1 ($& stays literal) from the sandbox", out, 1, true)
    end
    assert.matches("terminal said: hi moonbox, 6%*7=42", out)
    assert.matches("TERM%-ignoring tree %(pgid %d+%): SIGKILL after %d+ ms; tree empty: true", out)
    assert.matches("'sleep 600' processes left in the sandbox: 0", out, 1, true)
    assert.truthy(out:find("sandbox " .. id .. " deleted in the cloud\n", 1, true), out)
    assert.is_nil(out:find("local sandboxd", 1, true))
  end)

  it("creates, writes, runs, terminates and deletes", function()
    local mb = require "moonbox"
    mb.run(function()
      local ctx = { policies = compose.policies(nil), getenv = getenv }
      ctx.e2b = require("moonbox.e2b").new(ctx, { cwd = "/home/user/workspace", timeoutMs = 120000 })
      ctx.fs = require("moonbox.fs.e2b").new(ctx, { maxReadBytes = 1 << 20, diffBasisMaxBytes = 1 << 20 })
      ctx.subprocess = require("moonbox.subprocess.e2b").new(ctx, { frameLineMax = 40000, pipeBufferBytes = 262144 })
      local sb = assert(ctx.e2b:sandbox(180000))
      local t = assert(ctx.fs:resolve("cloud.txt"))
      assert(ctx.fs:writeText(t, "a\r\nb\r\n", { kind = "createIfAbsent" }))
      assert(ctx.fs:editText(t, { oldString = "b", newString = "$&" }))
      assert.are.equal("a\r\n$&\r\n", ctx.fs:readBytes(t, 100))
      local h = assert(ctx.subprocess:spawn{ argv = { "cat", "cloud.txt" }, cwd = sb.cwd, graceMs = 1000,
        stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } } })
      assert.are.same({ exitCode = 0 }, assert(h:wait(60000)))
      assert.are.equal("a\r\n$&\r\n", h.collected.stdout:readFrom(0).text)
      local k = assert(ctx.subprocess:spawn{ argv = { "/bin/sh", "-c", "trap '' TERM; sleep 300" }, cwd = sb.cwd, graceMs = 500,
        stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } } })
      assert(k:terminate())
      assert.are.same({ signal = "SIGKILL" }, assert(k:wait(60000)))
      assert.is_true(k:waitForExit(60000))
      assert(ctx.subprocess:dispose())
      assert(ctx.fs:dispose())
      local id = sb.id
      assert(ctx.e2b:dispose())
      local ep = require("moonbox.e2b").endpoints({}, getenv)
      local api = require("moonbox.e2b.api").new{ url = ep.api_url, api_key = key, http = mb.http }
      local _, err = api:get(id)
      assert.are.equal("E2B_NOT_FOUND", err and err.code)
    end)
  end)
end)
