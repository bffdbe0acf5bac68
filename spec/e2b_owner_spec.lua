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
local function install_ok()
  return envelope_stream{ { event = { start = { pid = 2 } } }, { event = { ["end"] = { exited = true, status = "exit status 0" } } } }
end
local function created(id) return { status = 201, body = cjson.encode{ sandboxID = id, envdVersion = "0.6.3", envdAccessToken = "tok" } } end

describe("moonbox.e2b owner (scripted transport)", function()
  local mb, fake, e2b, saved_find, saved_core
  before_each(function()
    mb = fake_mb.install()
    fake = fake_http.new()
    mb.http = fake.http
    mb.pstream = fake.pstream
    saved_core = package.loaded["moonbox.core"]
    package.loaded["moonbox.core"] = saved_core or core
    e2b = require "moonbox.e2b"
    local endpoints = require "moonbox.e2b.endpoints"
    saved_find = require("moonbox.binaries").find
    require("moonbox.binaries").find = function() return "/host/mbwrap" end
  end)
  after_each(function()
    require("moonbox.binaries").find = saved_find
    package.loaded["moonbox.core"] = saved_core
    fake_mb.uninstall()
  end)

  local function owner(config, policies)
    local cfg = { apiKey = "e2b_00", cwd = "/home/user/workspace", timeoutMs = 300000, envdCodec = "json" }   -- the script speaks JSON
    for k, v in pairs(config or {}) do cfg[k] = v end
    return e2b.new({ policies = policies or compose.policies(nil) }, cfg)
  end
  local function urls() local out = {} for i, r in ipairs(fake.log) do out[i] = r.method .. " " .. r.url:gsub("^https?://[^/]+", "") end return out end
  -- A setup expected to fail: returns its error, after a dispose that must succeed.
  local function failed_setup()
    return mb.run(function()
      local o = owner()
      local _, e = o:sandbox()
      assert(o:dispose())
      return e
    end)
  end

  it("sets up in four requests (mbwrap installed by root) and hands out the handle", function()
    fake.push(created("ia")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(install_ok()); fake.push(prepare_ok())
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
    -- mbwrap lives outside the user's runtime root, in a directory root owns
    assert.truthy(sb.wrapper:match("^/opt/%.moonbox%-%x+/mbwrap$"), sb.wrapper)
    assert.are.equal(sb.wrapper_dir .. "/mbwrap", sb.wrapper)
    local u = urls()
    assert.are.equal("POST /sandboxes", u[1])
    assert.truthy(u[2]:match("^POST /files%?path=/opt/%.moonbox%-%x+/mbwrap&username=root$"), u[2])
    assert.are.equal("/host/mbwrap", fake.log[2].body_file)
    assert.are.equal("POST /process.Process/Start", u[3])
    assert.are.equal("POST /process.Process/Start", u[4])
    assert.are.equal("DELETE /sandboxes/ia", u[5])
    assert.are.equal(5, #fake.log)
    local function start_of(i)
      local _, len = string.unpack(">B I4", fake.log[i].body)
      return cjson.decode(fake.log[i].body:sub(6, 5 + len))
    end
    -- the install runs as root (Basic auth "root:") and verifies what it installed
    assert.are.equal("Basic cm9vdDo=", fake.log[3].headers["Authorization"])
    local install = start_of(3)
    assert.are.equal("/bin/sh", install.process.cmd)
    assert.are.same({ sb.wrapper_dir, sb.wrapper }, { table.unpack(install.process.args, 4, 5) })
    assert.truthy(install.process.args[2]:find("stat -c '%u %a %h'", 1, true))
    -- the prepare process runs as the sandbox user and gets root and cwd as arguments, never
    -- through a shell string
    assert.is_nil(fake.log[4].headers["Authorization"])
    local start = start_of(4)
    assert.are.equal("/bin/sh", start.process.cmd)
    assert.are.same({ sb.root, "/home/user/workspace" }, { table.unpack(start.process.args, 4, 5) })
    assert.is_nil(fake.log[4].headers["X-API-KEY"]); assert.are.equal("tok", fake.log[4].headers["X-Access-Token"])
  end)

  it("deletes once and reports the original error when setup fails", function()
    fake.push(created("ib")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(install_ok())
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

  it("refuses an mbwrap install that does not verify", function()
    fake.push(created("iw")); fake.push{ status = 200, body = '[{"path":"x"}]' }
    fake.push(envelope_stream{ { event = { start = { pid = 3 } } },
      { event = { data = { stderr = core.b64encode("mbwrap must be a root-owned 0755 regular file: /opt/x/mbwrap\n") } } },
      { event = { ["end"] = { exitCode = 3, status = "exit status 3" } } } })
    fake.push{ status = 204 }
    local err = failed_setup()
    assert.are.equal("E2B_SETUP", err.code)
    assert.truthy(err.message:find("root-owned", 1, true), err.message)
    assert.are.equal("DELETE /sandboxes/iw", urls()[4])
    assert.are.equal(4, #fake.log)                  -- no user process ever ran with it
  end)

  it("reports a failed delete and retries it on the next dispose", function()
    fake.push(created("ir")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(install_ok()); fake.push(prepare_ok())
    fake.push{ status = 500, body = '{"code":500,"message":"delete failed"}' }
    fake.push{ status = 204 }
    local r = mb.run(function()
      local o = owner()
      assert(o:sandbox())
      local ok1, e1 = o:dispose()
      local ok2, e2 = o:dispose()
      local ok3 = o:dispose()
      return { ok1 = ok1, e1 = e1, ok2 = ok2, e2 = e2, ok3 = ok3 }
    end)
    assert.is_nil(r.ok1); assert.are.equal("E2B_HTTP", r.e1.code)
    assert.is_true(r.ok2); assert.is_nil(r.e2); assert.is_true(r.ok3)
    local deletes = 0
    for _, u in ipairs(urls()) do if u == "DELETE /sandboxes/ir" then deletes = deletes + 1 end end
    assert.are.equal(2, deletes)
  end)

  it("delete_not_found_is_gone = false makes a vanished sandbox a disposal error", function()
    fake.push(created("inf")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(install_ok()); fake.push(prepare_ok())
    fake.push{ status = 404, body = '{"code":404,"message":"sandbox not found"}' }
    local policies = compose.policies(nil, { lifecycle = { delete_not_found_is_gone = false } })
    local ok, err = mb.run(function()
      local o = owner(nil, policies)
      assert(o:sandbox())
      return o:dispose()
    end)
    assert.is_nil(ok); assert.are.equal("E2B_NOT_FOUND", err.code)
    assert.truthy(err.message:find("inf", 1, true))
  end)

  it("starts its own sandboxd with --exit-with-parent", function()
    local argv
    mb.proc = { spawn = function(opts) argv = opts.argv return nil, mb.error("MB_TEST", "not really") end }
    local err = mb.run(function()
      local o = e2b.new({ policies = compose.policies(nil), getenv = function() return nil end },
        { cwd = "/home/user/workspace", timeoutMs = 300000 })
      local _, e = o:sandbox()
      o:dispose()
      return e
    end)
    mb.proc = nil
    assert.are.equal("MB_TEST", err.code)
    assert.are.equal("/host/mbwrap", argv[1])     -- find_binary is stubbed in these specs
    local flags = {}
    for _, a in ipairs(argv) do flags[a] = true end
    assert.is_true(flags["--exit-with-parent"])
    assert.are.equal(0, #fake.log)
  end)

  it("does not delete when creation itself failed", function()
    fake.push{ status = 401, body = '{"code":401,"message":"bad key"}' }
    local err = failed_setup()
    assert.are.equal("E2B_UNAUTHORIZED", err.code)
    assert.are.equal(1, #fake.log)
  end)

  it("blocks acquisitions once disposal starts, waits for setup, treats not-found as gone", function()
    fake.push(created("ic")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(install_ok()); fake.push(prepare_ok())
    fake.push{ status = 404, body = '{"code":404,"message":"sandbox not found"}' }
    local r = mb.run(function()
      local o = owner()
      local ok, err = o:dispose()                  -- setup still running: dispose waits for it
      local sb, serr = o:sandbox()
      return { ok = ok, err = err, sb = sb, serr = serr }
    end)
    assert.is_true(r.ok); assert.is_nil(r.err)
    assert.is_nil(r.sb); assert.are.equal("E2B_DISPOSING", r.serr.code)
    assert.are.equal("DELETE /sandboxes/ic", urls()[5])
  end)

  it("connects to an existing sandbox by id and at disposal removes only what it made there", function()
    fake.push{ status = 200, body = cjson.encode{ sandboxID = "iexisting", envdVersion = "0.6.3" } }
    fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(install_ok()); fake.push(prepare_ok())
    fake.push(install_ok())                          -- the cleanup: one root process, exit 0
    local sb = mb.run(function()
      local o = owner{ sandboxId = "iexisting", timeoutMs = 60000 }
      local sb = assert(o:sandbox())
      assert.are.equal("iexisting", sb.id)
      assert(o:dispose())
      return sb
    end)
    local u = urls()
    assert.are.equal("POST /sandboxes/iexisting/connect", u[1])
    assert.are.same({ timeout = 60 }, cjson.decode(fake.log[1].body))
    assert.are.equal(5, #u)                          -- no DELETE: the sandbox is not ours
    assert.are.equal("POST /process.Process/Start", u[5])
    assert.are.equal("Basic cm9vdDo=", fake.log[5].headers["Authorization"])
    local _, len = string.unpack(">B I4", fake.log[5].body)
    local start = cjson.decode(fake.log[5].body:sub(6, 5 + len))
    assert.are.same({ "-rf", "--", sb.root, sb.wrapper_dir }, start.process.args)
  end)

  it("renews the lease per policy while open", function()
    fake.push(created("id")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(install_ok()); fake.push(prepare_ok())
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
    fake.push(created("ie")); fake.push{ status = 200, body = '[{"path":"x"}]' }; fake.push(install_ok()); fake.push(prepare_ok())
    fake.push{ status = 204 }
    local policies = compose.policies(nil, { lifecycle = { renew = false } })
    mb.run(function()
      local o = owner({ timeoutMs = 10000 }, policies)
      assert(o:sandbox())
      mb.sleep(16000)
      assert(o:dispose())
    end)
    for _, u in ipairs(urls()) do assert.are_not.equal("POST /sandboxes/ie/timeout", u) end
  end)

  describe("find_binary", function()
    local dirs = {}
    local function bindir(name)
      local p = io.popen("mktemp -d /tmp/moonbox-find.XXXXXX")
      local d = p:read("l"); p:close()
      os.execute("mkdir -p " .. d .. "/bin && touch " .. d .. "/bin/" .. name)
      dirs[#dirs + 1] = d
      return d
    end
    after_each(function() for _, d in ipairs(dirs) do os.execute("rm -rf " .. d) end dirs = {} end)

    it("prefers the running moonbox's directory, then MB_BUILD_DIR, over the source tree's build", function()
      local exe_build, env_build = bindir("sandboxd"), bindir("sandboxd")
      local function env(t) return function(n) return t[n] end end
      local find = saved_find
      assert.are.equal(exe_build .. "/bin/sandboxd",
        find("MOONBOX_SANDBOXD", "sandboxd", env{ MB_BUILD_DIR = env_build }, exe_build .. "/bin/moonbox"))
      assert.are.equal(env_build .. "/bin/sandboxd",
        find("MOONBOX_SANDBOXD", "sandboxd", env{ MB_BUILD_DIR = env_build }, false))
      assert.are.equal("/x/sandboxd",
        find("MOONBOX_SANDBOXD", "sandboxd", env{ MB_BUILD_DIR = env_build, MOONBOX_SANDBOXD = "/x/sandboxd" }, exe_build .. "/bin/moonbox"))
      -- a moonbox directory without the binary falls through to MB_BUILD_DIR
      assert.are.equal(env_build .. "/bin/sandboxd",
        find("MOONBOX_SANDBOXD", "sandboxd", env{ MB_BUILD_DIR = env_build }, "/nonexistent/bin/moonbox"))
    end)

    it("knows when it runs inside a Lua interpreter rather than moonbox", function()
      assert.is_nil(saved_find and e2b.moonbox_exe())   -- busted runs in lua5.4
    end)
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
      assert.is_nil(text:find("e2b_secret", 1, true))
      text = text:sub(1, text:find("\npolicy env\n", 1, true))     -- the plugins, before the policy values
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

describe("moonbox.e2b owner on sandboxd #sandboxd", function()
  local P = require "seam.provider"
  local mb
  setup(function() mb = require "moonbox" end)

  it("installs mbwrap root-owned where the sandbox user can neither replace nor change it", function()
    local s = P.open()
    local w, d = s.sandbox.wrapper, s.sandbox.wrapper_dir
    P.run(function()
      local q = function(x) return "'" .. x:gsub("'", "'\"'\"'") .. "'" end
      local out, code = P.sh("stat -c '%u %a %F' " .. q(d) .. " " .. q(w))
      assert.are.equal(0, code)
      assert.are.equal("0 755 directory\n0 755 regular file\n", out)
      assert.is_nil(d:find(s.sandbox.root, 1, true))                      -- not in the user's runtime root
      for _, attack in ipairs({
        "printf x > " .. q(w), "rm -f " .. q(w), "mv " .. q(w) .. " " .. q(w .. ".old"),
        "chmod 777 " .. q(w), "mv " .. q(d) .. " " .. q(d .. ".old"), "touch " .. q(d .. "/x"),
      }) do
        local _, c = P.sh(attack .. " 2>/dev/null")
        assert.are_not.equal(0, c, attack)
      end
      assert.are.equal("0 755 regular file\n", (P.sh("stat -c '%u %a %F' " .. q(w))))
      assert.are.equal("hi\n", (P.sh("echo hi")))                           -- and it still runs everything
      assert.are.equal("700 directory\n", (P.sh("stat -c '%a %F' " .. q(s.sandbox.root))))
    end)
    P.close()
  end)

  it("a local sandboxd does not outlive a killed moonbox", function()
    local build = assert(os.getenv("MB_BUILD_DIR"), "MB_BUILD_DIR")
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
local compose = require "moonbox.compose"
local ctx = { policies = compose.policies(nil), getenv = function() return nil end }
ctx.e2b = require("moonbox.e2b").new(ctx, { cwd = "/home/user/workspace", timeoutMs = 60000 })
assert(ctx.e2b:sandbox(60000))
io.write("sandboxd ", ctx.e2b.sandboxd.pid, " ", ctx.e2b.sandboxd.state, "\n"); io.flush()
require("moonbox").sleep(600000)
]])
    f:close()
    local function alive(pid)                         -- a zombie counts as gone
      local f = io.open("/proc/" .. pid .. "/stat", "r")
      if not f then return false end
      local st = f:read("a"); f:close()
      return st:match("^%d+ %b() (%a)") ~= "Z"
    end
    mb.run(function()
      -- the child runs the same Lua tree as this spec
      local lua_file = assert(package.searchpath("moonbox.e2b", package.path))
      if lua_file:sub(1, 1) ~= "/" then lua_file = assert(io.popen("pwd")):read("l") .. "/" .. lua_file end
      local home = assert(lua_file:match("^(.*)/lua/moonbox/e2b/init%.lua$"), lua_file)
      local p = assert(mb.proc.spawn{ argv = { build .. "/bin/moonbox", script },
        env = { PATH = os.getenv("PATH"), MB_BUILD_DIR = build, MOONBOX_HOME = home } })
      local buf = ""
      while not buf:find("\n", 1, true) do
        local c = p:read("stdout", 60000)
        if not c then break end
        buf = buf .. c
      end
      local pid, state = buf:match("^sandboxd (%d+) (%S+)\n")
      assert.truthy(pid, buf .. (p:read("stderr", 100) or ""))
      assert.is_true(alive(pid))
      p:kill("SIGKILL")
      p:wait(10000)
      p:close()
      for _ = 1, 600 do                                 -- it exits on its own; no deadline asserted
        if not alive(pid) then break end
        mb.sleep(50)
      end
      local gone = not alive(pid)
      if not gone then os.execute("kill -9 " .. pid) end
      os.execute("rm -rf '" .. state .. "'")
      assert.is_true(gone, "sandboxd " .. pid .. " outlived its moonbox")
    end)
    os.remove(script)
  end)
end)

describe("moonbox.e2b endpoints (getenv table)", function()
  local e2b = require "moonbox.e2b"
  local function env(t) return function(name) return t[name] end end

  it("starts a local sandboxd only when no key, URL or domain is given (empty counts as unset)", function()
    local ep = e2b.endpoints({}, env{})
    assert.is_true(ep.local_sandboxd)
    assert.is_nil(ep.api_key)
    ep = e2b.endpoints({}, env{ E2B_API_KEY = "", E2B_API_URL = "", E2B_SANDBOX_URL = "", E2B_DOMAIN = "" })
    assert.is_true(ep.local_sandboxd)
    for _, name in ipairs({ "E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN" }) do
      assert.is_false(e2b.endpoints({}, env{ [name] = "x" }).local_sandboxd, name)
    end
    assert.is_false(e2b.endpoints({ apiKey = "e2b_cfg" }, env{}).local_sandboxd)
  end)

  it("takes the key from config, else E2B_API_KEY", function()
    assert.are.equal("e2b_env", e2b.endpoints({}, env{ E2B_API_KEY = "e2b_env" }).api_key)
    assert.are.equal("e2b_cfg", e2b.endpoints({ apiKey = "e2b_cfg" }, env{ E2B_API_KEY = "e2b_env" }).api_key)
  end)

  it("derives the API and sandbox URLs from E2B_DOMAIN like the SDK", function()
    local ep = e2b.endpoints({}, env{ E2B_API_KEY = "k" })
    assert.are.equal("https://api.e2b.app", ep.api_url)
    assert.are.equal("https://sandbox.e2b.app", e2b.sandbox_url(ep, "iabc"))
    ep = e2b.endpoints({}, env{ E2B_API_KEY = "k", E2B_DOMAIN = "example.org" })
    assert.are.equal("https://api.example.org", ep.api_url)
    assert.are.equal("https://49983-iabc.example.org", e2b.sandbox_url(ep, "iabc"))
    ep = e2b.endpoints({}, env{ E2B_API_KEY = "k", E2B_DOMAIN = "e2b.dev" })
    assert.are.equal("https://api.e2b.dev", ep.api_url)
    assert.are.equal("https://sandbox.e2b.dev", e2b.sandbox_url(ep, "iabc"))
    -- the domain the control plane reports for the sandbox wins over the configured one
    assert.are.equal("https://49983-iabc.other.net", e2b.sandbox_url(ep, "iabc", "other.net"))
  end)

  it("lets E2B_API_URL and E2B_SANDBOX_URL override the domain", function()
    local ep = e2b.endpoints({}, env{ E2B_API_KEY = "k", E2B_DOMAIN = "example.org",
      E2B_API_URL = "http://127.0.0.1:1", E2B_SANDBOX_URL = "http://127.0.0.1:2" })
    assert.are.equal("http://127.0.0.1:1", ep.api_url)
    assert.are.equal("http://127.0.0.1:2", e2b.sandbox_url(ep, "iabc"))
    assert.are.equal("http://127.0.0.1:2", e2b.sandbox_url(ep, "iabc", "other.net"))
    ep = e2b.endpoints({}, env{ E2B_API_KEY = "k", E2B_API_URL = "http://127.0.0.1:1" })
    assert.are.equal("http://127.0.0.1:1", ep.api_url)
    assert.are.equal("https://sandbox.e2b.app", e2b.sandbox_url(ep, "iabc"))
  end)
end)

describe("moonbox.e2b preparation script on sandboxd #sandboxd", function()
  local P = require "seam.provider"
  local e2b = require "moonbox.e2b"
  local function q(x) return "'" .. x:gsub("'", "'\"'\"'") .. "'" end

  it("refuses a runtime root that is a symlink and creates a missing cwd", function()
    local sb = P.open().sandbox
    P.run(function()
      local base = P.scratch("prep")
      local victim, root = base .. "/victim", base .. "/root"
      local _, code, err = P.sh("mkdir -p " .. q(victim) .. " && chmod 755 " .. q(victim) .. " && ln -s " .. q(victim) .. " " .. q(root))
      assert(code == 0, err)
      local cwd = base .. "/new/cwd"
      -- a symlink planted where the runtime root goes: mkdir refuses it
      local r = assert(sb:exec({ "/bin/sh", "-c", e2b.PREPARE, "moonbox-prepare", root, cwd }))
      assert.are.equal(3, r.exit_code)
      assert.truthy(r.stderr:find("cannot make the runtime root: " .. root, 1, true), r.stderr)
      assert.are.equal("", r.stdout)
      -- a symlink swapped in after mkdir (a mkdir that reports success without making anything):
      -- the verification refuses it with the "real directory" error
      local fake = base .. "/fakebin"
      _, code, err = P.sh("mkdir -p " .. q(fake) .. " && printf '#!/bin/sh\\nexit 0\\n' > " .. q(fake .. "/mkdir")
        .. " && chmod 755 " .. q(fake .. "/mkdir"))
      assert(code == 0, err)
      r = assert(sb:exec({ "/bin/sh", "-c", e2b.PREPARE, "moonbox-prepare", root, cwd },
        { envs = { PATH = fake .. ":/usr/bin:/bin" } }))
      assert.are.equal(3, r.exit_code)
      assert.truthy(r.stderr:find("runtime root must be a real directory: " .. root, 1, true), r.stderr)
      -- neither run touched the symlink's target or made cwd
      assert.are.equal("755 directory\nabsent\n", (P.sh("stat -c '%a %F' " .. q(victim) .. "; [ -e " .. q(cwd) .. " ] || echo absent")))
      -- a fresh root and a cwd that does not exist yet: both made, home and environment reported
      local root2 = base .. "/root2"
      r = assert(sb:exec({ "/bin/sh", "-c", e2b.PREPARE, "moonbox-prepare", root2, cwd }))
      assert.are.equal(0, r.exit_code, r.stderr)
      local home, ambient = e2b.parse_prepare(r.stdout)
      assert.are.equal(sb.home, home)
      assert.is_string(ambient.PATH)
      assert.are.equal("700 directory\n", (P.sh("stat -c '%a %F' " .. q(root2))))
      assert.are.equal("directory\n", (P.sh("stat -c '%F' " .. q(cwd))))
      P.sh("rm -rf " .. q(base))
    end)
    P.close()
  end)
end)
