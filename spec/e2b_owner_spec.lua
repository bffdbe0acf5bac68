-- The sandbox owner (moonbox.e2b) against a scripted control plane and envd: setup, rollback,
-- disposal, connect-by-id and lease renewal driven by policies/lifecycle.lua.
local cjson = require "cjson"
local fake_mb = require "support.fake_mb"
local fake_http = require "support.fake_http"
local compose = require "moonbox.compose"

local core = fake_http.core()

local function envelope_stream(events)
  local body = {}
  for _, e in ipairs(events) do body[#body + 1] = core.envelope(0, cjson.encode(e)) end
  body[#body + 1] = core.envelope(2, "{}")
  return { status = 200, headers = { ["content-type"] = "application/connect+json" }, chunks = { table.concat(body) } }
end
local function prepare_ok()
  return envelope_stream{
    { event = { start = { pid = 3 } } },
    { event = { data = { stdout = core.b64encode("/home/user\0PATH=/usr/bin\0HOME=/root\0PWD=/x\0API_TOKEN=t\0") } } },
    { event = { ["end"] = { exited = true, status = "exit status 0" } } },
  }
end
local function created(id) return { status = 201, body = cjson.encode{ sandboxID = id, envdVersion = "0.6.3", envdAccessToken = "tok" } } end

describe("moonbox.e2b owner (scripted transport)", function()
  local mb, fake, e2b, saved_find, saved_core
  before_each(function()
    mb = fake_mb.install()
    fake = fake_http.new()
    mb.http = fake.http
    saved_core = package.loaded["moonbox.core"]
    package.loaded["moonbox.core"] = saved_core or core
    e2b = require "moonbox.e2b"
    saved_find = e2b.find_binary
    e2b.find_binary = function() return "/host/mbwrap" end
  end)
  after_each(function()
    e2b.find_binary = saved_find
    package.loaded["moonbox.core"] = saved_core
    fake_mb.uninstall()
  end)

  local function owner(config, policies)
    local cfg = { apiKey = "e2b_00", cwd = "/home/user/workspace", timeoutMs = 300000 }
    for k, v in pairs(config or {}) do cfg[k] = v end
    return e2b.new({ policies = policies or compose.policies(nil) }, cfg)
  end
  local function urls() local out = {} for i, r in ipairs(fake.log) do out[i] = r.method .. " " .. r.url:gsub("^https?://[^/]+", "") end return out end

  it("sets up in three requests and hands out the handle", function()
    fake.push(created("ia")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(prepare_ok())
    fake.push{ status = 204 }
    local sb, o = mb.run(function()
      local o = owner()
      local sb = assert(o:sandbox())
      assert(o:dispose())
      return sb, o
    end)
    assert.are.equal("ia", sb.id)
    assert.are.equal("/home/user", sb.home)
    assert.are.same({ PATH = "/usr/bin", HOME = "/home/user", API_TOKEN = "t" }, sb.ambient)
    assert.truthy(sb.root:match("^/tmp/%.moonbox%-%x+$"))
    local u = urls()
    assert.are.equal("POST /sandboxes", u[1])
    assert.truthy(u[2]:match("^POST /files%?path=/tmp/%.moonbox%-%x+/mbwrap$"), u[2])
    assert.are.equal("/host/mbwrap", fake.log[2].body_file)
    assert.are.equal("POST /process.Process/Start", u[3])
    assert.are.equal("DELETE /sandboxes/ia", u[4])
    assert.are.equal(4, #fake.log)
    -- the prepare process gets root, cwd and wrapper as arguments, never through a shell string
    local _, len = string.unpack(">B I4", fake.log[3].body)
    local start = cjson.decode(fake.log[3].body:sub(6, 5 + len))
    assert.are.equal("/bin/sh", start.process.cmd)
    assert.are.same({ sb.root, "/home/user/workspace", sb.wrapper }, { table.unpack(start.process.args, 4, 6) })
    assert.is_nil(fake.log[3].headers["X-API-KEY"]); assert.are.equal("tok", fake.log[3].headers["X-Access-Token"])
  end)

  it("deletes once and reports the original error when setup fails", function()
    fake.push(created("ib")); fake.push{ status = 200, body = '[{"path":"x"}]' }
    fake.push(envelope_stream{ { event = { start = { pid = 3 } } },
      { event = { data = { stderr = core.b64encode("runtime root must be a real directory: /tmp/x\n") } } },
      { event = { ["end"] = { exitCode = 3, status = "exit status 3" } } } })
    fake.push{ status = 500, body = '{"code":500,"message":"delete failed"}' }
    local err1, err2, disposed = mb.run(function()
      local o = owner()
      local _, e1 = o:sandbox()
      local _, e2 = o:sandbox()
      return e1, e2, o:dispose()
    end)
    assert.are.equal("E2B_SETUP", err1.code)
    assert.truthy(err1.message:find("real directory", 1, true))
    assert.are.equal(err1, err2)
    assert.is_true(disposed)
    local deletes = 0
    for _, u in ipairs(urls()) do if u:match("^DELETE") then deletes = deletes + 1 end end
    assert.are.equal(1, deletes)
  end)

  it("does not delete when creation itself failed", function()
    fake.push{ status = 401, body = '{"code":401,"message":"bad key"}' }
    local err = mb.run(function()
      local o = owner()
      local _, e = o:sandbox()
      assert(o:dispose())
      return e
    end)
    assert.are.equal("E2B_UNAUTHORIZED", err.code)
    assert.are.equal(1, #fake.log)
  end)

  it("blocks acquisitions once disposal starts, waits for setup, treats not-found as gone", function()
    fake.push(created("ic")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(prepare_ok())
    fake.push{ status = 404, body = '{"code":404,"message":"sandbox not found"}' }
    local r = mb.run(function()
      local o = owner()
      local ok, err = o:dispose()                  -- setup still running: dispose waits for it
      local sb, serr = o:sandbox()
      return { ok = ok, err = err, sb = sb, serr = serr }
    end)
    assert.is_true(r.ok); assert.is_nil(r.err)
    assert.is_nil(r.sb); assert.are.equal("E2B_DISPOSING", r.serr.code)
    assert.are.equal("DELETE /sandboxes/ic", urls()[4])
  end)

  it("connects to an existing sandbox by id and leaves it alone at disposal", function()
    fake.push{ status = 200, body = cjson.encode{ sandboxID = "iexisting", envdVersion = "0.6.3" } }
    fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(prepare_ok())
    mb.run(function()
      local o = owner{ sandboxId = "iexisting", timeoutMs = 60000 }
      assert.are.equal("iexisting", assert(o:sandbox()).id)
      assert(o:dispose())
    end)
    local u = urls()
    assert.are.equal("POST /sandboxes/iexisting/connect", u[1])
    assert.are.same({ timeout = 60 }, cjson.decode(fake.log[1].body))
    assert.are.equal(3, #u)
  end)

  it("renews the lease per policy while open", function()
    fake.push(created("id")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(prepare_ok())
    for _ = 1, 3 do fake.push{ status = 204 } end
    fake.push{ status = 204 }
    mb.run(function()
      local o = owner{ timeoutMs = 10000 }
      assert(o:sandbox())
      mb.sleep(16000)                              -- renewals due at 5 s, 10 s, 15 s
      assert(o:dispose())
    end)
    local renewals = 0
    for i, u in ipairs(urls()) do
      if u == "POST /sandboxes/id/timeout" then
        renewals = renewals + 1
        assert.are.same({ timeout = 10 }, cjson.decode(fake.log[i].body))
      end
    end
    assert.are.equal(3, renewals)
    assert.are.equal("DELETE /sandboxes/id", urls()[#fake.log])
  end)

  it("an edited lifecycle policy turns renewal off", function()
    fake.push(created("ie")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(prepare_ok())
    fake.push{ status = 204 }
    local policies = compose.policies(nil)
    policies.lifecycle = setmetatable({ renew = false }, { __index = require("policies.lifecycle") })
    policies.lifecycle.renewal_delay = function(ms)
      if not policies.lifecycle.renew then return nil end
      return require("policies.lifecycle").renewal_delay(ms)
    end
    mb.run(function()
      local o = owner({ timeoutMs = 10000 }, policies)
      assert(o:sandbox())
      mb.sleep(16000)
      assert(o:dispose())
    end)
    for _, u in ipairs(urls()) do assert.are_not.equal("POST /sandboxes/ie/timeout", u) end
  end)

  describe("configuration", function()
    local function load(src) return compose.load("c.lua", { source = src }) end
    it("validates cwd and timeoutMs with file:line and field", function()
      local _, err = load('plugin "e2b" { cwd = "rel/path" }')
      assert.truthy(err.message:find('c.lua:1: plugin "e2b": field cwd: must be an absolute Linux path', 1, true), err.message)
      _, err = load('plugin "e2b" {\n timeoutMs = 0 }')
      assert.truthy(err.message:find("field timeoutMs: must be a positive finite number", 1, true), err.message)
    end)
    it("redacts the API key in the dump and lists only mounted plugins", function()
      local text = assert(compose.dump("c.lua", { source = 'plugin "e2b" { apiKey = "e2b_secret" }', quiet = true }))
      assert.truthy(text:find("apiKey = <redacted>", 1, true)); assert.is_nil(text:find("e2b_secret", 1, true))
      assert.truthy(text:find('cwd = "/home/user/workspace"', 1, true))
      assert.is_nil(text:find("subprocess", 1, true)); assert.is_nil(text:find("%. fs "))
    end)
    it("derives envd URLs like the SDK", function()
      local ep = { domain = nil }
      assert.are.equal("https://sandbox.e2b.app", e2b.sandbox_url(ep, "iabc"))
      assert.are.equal("https://49983-iabc.example.org", e2b.sandbox_url(ep, "iabc", "example.org"))
      assert.are.equal("http://127.0.0.1:9", e2b.sandbox_url({ sandbox_url = "http://127.0.0.1:9" }, "iabc"))
    end)
  end)
end)
