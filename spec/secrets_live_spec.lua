-- Credentials that never enter the sandbox, against a real sandboxd (issue 18): `moonbox secret`
-- on its store; a composition whose network policy has rules (a stored secret and a host
-- variable): the rules sandboxd reports name the secrets, the variable's secret exists for that
-- sandbox only while it runs and is gone after, the value is nowhere the sandbox can read;
-- updateNetwork with rules; a secret the store lacks stops the start; allowPublicTraffic = false
-- and the token ctx.e2b:host(port) returns; and, as root, a request from inside the sandbox to a
-- test upstream that says whether the header arrived (never echoing it). Uses the suite's
-- sandboxd (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY) and, for the upstream, one of its own.
local H = require "support.helpers"
local cjson = require "cjson"
local policies = require "moonbox.policies"
local cli = require "support.cli"
local tmpdir, write, q = cli.tmpdir, cli.write, cli.q

local VALUE = "live-s3cr3t-" .. require("moonbox.ids").hex(12)

local function sha256(s)
  local path = os.tmpname()
  write(path, s)
  local p = assert(io.popen("sha256sum " .. q(path)))
  local hex = p:read("l"):match("^(%x+)")
  p:close()
  os.remove(path)
  return hex
end

describe("secrets and per-host rules on sandboxd #sandboxd", function()
  local mb, dir
  setup(function() mb = require "moonbox" end)
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  local function endpoint_env(d)
    if d then return { E2B_API_URL = d.url, E2B_SANDBOX_URL = d.url, E2B_API_KEY = d.key } end
    return { E2B_API_URL = os.getenv("E2B_API_URL"), E2B_SANDBOX_URL = os.getenv("E2B_SANDBOX_URL"), E2B_API_KEY = os.getenv("E2B_API_KEY") }
  end
  -- The client on the suite's sandboxd (raw: for calls from a task already running).
  local function raw_client(d)
    local env = endpoint_env(d)
    return assert(require("moonbox.e2b.client").new{ getenv = function(n) return env[n] end })
  end
  -- The same, its calls each in a task of their own.
  local function client(d)
    local c = raw_client(d)
    return setmetatable({}, { __index = function(_, k)
      return function(_, ...) local args = table.pack(...) return H.run(function() return c[k](c, table.unpack(args, 1, args.n)) end) end
    end })
  end
  -- A sandbox of the e2b plugin with the network policy `src` (and the plugin's config), the
  -- host variables in `vars` (seen only through ctx.getenv); fn(ctx, sb); disposed after. A
  -- sandbox that does not start raises, unless config.may_fail (then → nil, err).
  local function with(src, config, vars, fn, d)
    config = config or {}
    local may_fail = config.may_fail
    config.may_fail = nil
    write(dir .. "/net.lua", src)
    local set = assert(policies.load{ { files = { network = dir .. "/net.lua" }, via = "spec" } })
    local env = endpoint_env(d)
    for k, v in pairs(vars or {}) do env[k] = v end
    return H.run(function()
      local ctx = { policies = set, getenv = function(n) return env[n] end }
      local cfg = { cwd = "/home/user/workspace", timeoutMs = 120000 }
      for k, v in pairs(config or {}) do cfg[k] = v end
      local o, oerr = require("moonbox.e2b").new(ctx, cfg)
      if not o then
        if may_fail then return nil, oerr end
        error(oerr, 0)
      end
      ctx.e2b = o
      ctx.subprocess = require("moonbox.subprocess.e2b").new(ctx, { frameLineMax = 40000, pipeBufferBytes = 262144 })
      local sb, serr = o:sandbox(60000)
      local res = table.pack(pcall(function()
        if not sb then
          if may_fail then return nil, serr end
          error(serr, 0)
        end
        return fn(ctx, sb)
      end))
      ctx.subprocess:dispose()
      local dok, derr = o:dispose()
      if not res[1] then error(res[2], 0) end
      assert(dok, tostring(derr))
      return table.unpack(res, 2, res.n)
    end, 180000)
  end
  -- Is VALUE anywhere the sandbox can read (its processes' environments, its files)? The value is
  -- handed in reversed and turned back in the shell's memory only.
  local function found_inside(sb)
    local r = assert(sb:exec({ "/bin/sh", "-c", [[
v=$(printf %s "$1" | rev)
for f in /proc/[0-9]*/environ; do grep -qsF -- "$v" "$f" && echo "$f"; done
grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -- "$v" /etc /home /tmp /root /run /var /opt 2>/dev/null
exit 0]], "probe", VALUE:reverse() }, { user = "root", timeout_ms = 60000 }))
    return r.stdout
  end

  it("moonbox secret: set from stdin, info, list, a new version, delete; the value never shown", function()
    local name = "mb-spec-" .. require("moonbox.ids").hex(4)
    write(dir .. "/v", VALUE .. "\n")
    local function run(args) return cli.moonbox(args, { dir = dir }) end
    local code, out, err = run("secret set " .. name .. " <v")
    assert.are.same({ 0, ("created secret %s (version 1)\n"):format(name) }, { code, out }, err)
    code, out, err = run("secret set " .. name .. " --metadata team=spec <v")
    assert.are.same({ 0, ("updated secret %s (version 2)\n"):format(name) }, { code, out }, err)
    code, out = run("secret info " .. name .. " --json")
    local j = cjson.decode(out)
    assert.are.same({ name, 2, { team = "spec" } }, { j.name, j.version, j.metadata })
    assert.truthy(j.secretId:match("^sec_"), j.secretId)
    code, out = run("secret list --json")
    local seen = false
    for _, s in ipairs(cjson.decode(out)) do if s.name == name then seen = true end end
    assert.is_true(seen, out)
    assert.falsy(out:find(VALUE, 1, true))
    code, out = run("secret delete " .. name)
    assert.are.same({ 0, "deleted " .. name .. "\n" }, { code, out })
    code, _, err = run("secret info " .. name)
    assert.are.equal(1, code)
    assert.truthy(err:find("E2B_NOT_FOUND: secret " .. name .. " not found", 1, true), err)
  end)

  it("a composition's rules: the secrets by name in the sandbox's rules, the variable's secret for that sandbox only", function()
    local c = client()
    local stored = "mb-spec-gh-" .. require("moonbox.ids").hex(4)
    assert(c:setSecret(stored, VALUE .. "-stored"))
    local policy = table.concat({
      'allow_out = { "api.github.com", "registry.npmjs.org" }',
      'deny_out = { "0.0.0.0/0" }',
      "rules = {",
      ('  ["api.github.com"] = { headers = { Authorization = { secret = %q, format = "Bearer %%s" } } },'):format(stored),
      '  ["*.npmjs.org"] = { headers = { Authorization = { fromEnv = "MB_SPEC_NPM_TOKEN", format = "Bearer %s" } } },',
      "}", "" }, "\n")
    local id, scoped
    local ok, err = pcall(with, policy, nil, { MB_SPEC_NPM_TOKEN = VALUE }, function(ctx, sb)
      id = sb.id
      local info = assert(ctx.e2b:info())
      local rules = info.network.rules
      assert.are.equal("Bearer <secret " .. stored .. ">", rules["api.github.com"][1].transform.headers.Authorization)
      scoped = rules["*.npmjs.org"][1].transform.headers.Authorization:match("^Bearer <secret (mbenv%-%x+)>$")
      assert.truthy(scoped, cjson.encode(rules))
      local rc = raw_client()
      local s = assert(rc:secretInfo(scoped))
      assert.are.same({ ["sandboxd.sandbox"] = sb.id }, s.metadata)
      assert.are.equal("", found_inside(sb))
      -- a new rule set: a new secret for the variable, the first one gone once it is in force
      assert.is_true(ctx.e2b:updateNetwork(ctx.policies.network.options()))
      info = assert(ctx.e2b:info())
      local again = info.network.rules["*.npmjs.org"][1].transform.headers.Authorization:match("^Bearer <secret (mbenv%-%x+)>$")
      assert.truthy(again and again ~= scoped, tostring(again))
      assert.is_false(rc:secretExists(scoped))
      scoped = again
    end)
    c:deleteSecret(stored)
    assert(ok, err)
    assert.truthy(id)
    assert.is_false(c:secretExists(scoped))                -- gone with the sandbox
  end)

  it("a secret the store lacks stops the start before any sandbox is made", function()
    local c = client()
    local before = #assert(c:listAll{})
    local _, err = with('rules = { ["a.example"] = { headers = { A = { secret = "mb-spec-nosuch" } } } }\n', { may_fail = true },
      nil, function() error("the sandbox should not start") end)
    assert.are.equal("E2B_NOT_FOUND", err.code)
    assert.truthy(err.message:find("secret mb-spec-nosuch is not in the secret store of", 1, true), err.message)
    assert.are.equal(before, #assert(c:listAll{}))
  end)

  it("allowPublicTraffic = false: the port answers only with the token host(port) gives", function()
    with("", { allowPublicTraffic = false }, nil, function(ctx, sb)
      local url, headers = ctx.e2b:host(8123)
      assert.truthy(headers["e2b-traffic-access-token"], cjson.encode(headers))
      local h = assert(ctx.subprocess:spawn{ argv = { "python3", "-m", "http.server", "8123", "--bind", "127.0.0.1" },
        cwd = "/tmp", graceMs = 100, stdio = { stdin = "ignore", stdout = { maxBytes = 4096 }, stderr = { maxBytes = 4096 } } })
      local res
      for _ = 1, 100 do                                     -- until the server listens
        res = mb.http.request{ url = url, headers = headers, max_bytes = 1 << 20, timeout_ms = 10000 }
        if res and res.status == 200 then break end
        mb.sleep(100)
      end
      assert.are.equal(200, res and res.status)
      local bare = assert(mb.http.request{ url = url, max_bytes = 1 << 20, timeout_ms = 10000 })
      assert.are.equal(403, bare.status)                   -- E2B's edge's status and words
      assert.truthy(bare.body:find("e2b-traffic-access-token' is missing", 1, true), bare.body)
      local wrong = assert(mb.http.request{ url = url, headers = { ["e2b-traffic-access-token"] = "nope" }, max_bytes = 1 << 20,
        timeout_ms = 10000 })
      assert.are.equal(403, wrong.status)
      h:terminate()
      assert(sb)
    end)
  end)

  it("moonbox sandbox create --no-public-traffic, then sandbox host prints the header to pass", function()
    local code, out, err = cli.moonbox("sandbox create --timeout 60 --no-public-traffic --json")
    assert.are.equal(0, code, err)
    local it = cjson.decode(out)
    local ok, perr = pcall(function()
      assert.truthy(it.trafficAccessToken, out)
      code, out, err = cli.moonbox("sandbox host " .. it.sandboxId .. " 8080")
      assert.are.equal(0, code, err)
      assert.are.equal("e2b-traffic-access-token: " .. it.trafficAccessToken, out:match("^[^\n]+\n([^\n]+)\n$"), out)
      code, out = cli.moonbox("sandbox info " .. it.sandboxId)
      assert.truthy(out:find("ports need e2b-traffic-access-token", 1, true), out)
    end)
    cli.moonbox("sandbox kill " .. it.sandboxId)
    assert(ok, perr)
  end)

  it("is injected at the egress over HTTP and HTTPS: the upstream gets the header, the sandbox never the value (root)", function()
    if io.popen("id -u"):read("l") ~= "0" then pending("not root: no stand-in world") return end
    local world = assert(H.start_networld())
    local d = H.start_sandboxd{ args = { "--dns", world.dns, "--egress-ca", world.ca } }
    local want = sha256("Bearer " .. VALUE)
    local probe = [==[
import sys, urllib.request
for url, extra in [(sys.argv[1], None), (sys.argv[1], 'Bearer forged'), (sys.argv[3], None), (sys.argv[2], None)]:
    req = urllib.request.Request(url)
    if extra: req.add_header('Authorization', extra)
    try:
        print(urllib.request.urlopen(req, timeout=10).read().decode().strip())
    except Exception as e:
        print(type(e).__name__, getattr(e, 'code', ''))
]==]
    local ok, err = pcall(with, table.concat({
      'allow_out = { "allowed.test", "other.test" }',
      'deny_out = { "0.0.0.0/0" }',
      'rules = { ["allowed.test"] = { headers = { Authorization = { fromEnv = "MB_SPEC_TOKEN", format = "Bearer %s" } } } }',
      "" }, "\n"), nil, { MB_SPEC_TOKEN = VALUE }, function(ctx, sb)
      local h = assert(ctx.subprocess:spawn{ argv = { "python3", "-c", probe,
        "http://allowed.test/header/Authorization?sha256=" .. want, "http://other.test/header/Authorization?sha256=" .. want,
        "https://allowed.test/header/Authorization?sha256=" .. want },
        cwd = "/tmp", graceMs = 100, stdio = { stdin = "ignore", stdout = { maxBytes = 4096 }, stderr = { maxBytes = 4096 } } })
      assert(h:wait(60000))
      local out = h.collected.stdout:readFrom(0).text
      assert.are.equal("header Authorization match\nheader Authorization match\nheader Authorization match\nheader Authorization absent\n", out)
      assert.are.equal("", found_inside(sb))
    end, d)
    H.stop_sandboxd(d)
    world.stop()
    assert(ok, err)
  end)
end)
