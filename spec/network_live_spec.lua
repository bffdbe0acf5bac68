-- The network policy against a real sandboxd (E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY, as
-- scripts/test.sh starts one): the policy reaches the create request and getInfo reports it,
-- ctx.e2b:updateNetwork and `moonbox sandbox network` replace the rules, the server's own 400
-- names the entry, an unknown sandbox is E2B_NOT_FOUND.
local compose = require "moonbox.compose"
local H = require "support.helpers"
local cjson = require "cjson"

local cli = require "support.cli"
local tmpdir, write, q, moonbox = cli.tmpdir, cli.write, cli.q, cli.moonbox

describe("the network policy on sandboxd #sandboxd", function()
  local mb, dir
  setup(function() mb = require "moonbox" end)
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  local function with(policy, fn)
    write(dir .. "/net.lua", policy)
    write(dir .. "/c.lua", 'policies { network = "net.lua" }\nplugin "e2b" { timeoutMs = 120000 }\nplugin "subprocess" {}\n')
    return mb.run(function()
      local comp = assert(compose.load(dir .. "/c.lua"))
      local ctx, loaded = assert(compose.start(comp))
      local res = table.pack(pcall(fn, ctx))
      local ok, err = compose.stop(ctx, loaded)
      if not res[1] then error(res[2], 0) end
      assert(ok, err)
      return table.unpack(res, 2, res.n)
    end)
  end

  it("creates with the policy's rules, and getInfo reports them", function()
    with('internet = false\nallow_out = { "pypi.org", "*.pythonhosted.org", "198.51.100.0/24" }\n', function(ctx)
      local info = assert(ctx.e2b:info())
      -- as on E2B, allow_internet_access false stands for denyOut all traffic (allowOut still holds)
      assert.are.same({ allowOut = { "pypi.org", "*.pythonhosted.org", "198.51.100.0/24" }, denyOut = { "0.0.0.0/0" } }, info.network)
      assert.is_false(info.allowInternetAccess)
    end)
  end)

  it("ctx.e2b:updateNetwork replaces every rule; omitted fields are cleared", function()
    with('deny_out = { "0.0.0.0/0" }\nallow_out = { "pypi.org" }\n', function(ctx)
      assert.is_true(ctx.e2b:updateNetwork{ allowOut = { "*.pkg.dev" } })
      local info = assert(ctx.e2b:info())
      assert.are.same({ allowOut = { "*.pkg.dev" }, denyOut = {} }, info.network)
      assert.is_true(ctx.e2b:updateNetwork(ctx.policies.network.options()))   -- the composition's policy again
      info = assert(ctx.e2b:info())
      assert.are.same({ allowOut = { "pypi.org" }, denyOut = { "0.0.0.0/0" } }, info.network)
      -- a bad entry never leaves the host; the server refuses one on its own with a 400 naming it
      local ok, err = ctx.e2b:updateNetwork{ allowOut = { "10.0.0.0/33" } }
      assert.is_nil(ok)
      assert.are.equal("E2B_INVALID_ARGUMENT", err.code)
      local sb = assert(ctx.e2b:sandbox())
      ok, err = sb.api:update_network(sb.id, { allowOut = { "pypi.org", "10.0.0.0/33" } })
      assert.is_nil(ok)
      assert.are.same({ "E2B_INVALID_ARGUMENT", 400 }, { err.code, err.status })
      assert.truthy(err.message:find([[allowOut[1]': "10.0.0.0/33"]], 1, true), err.message)
      ok, err = require("moonbox.e2b").client{}
      assert.is_not_nil(ok, tostring(err))
      local _, nf = ok:updateNetwork("nosuchsandbox", { allowOut = { "pypi.org" } })
      assert.are.equal("E2B_NOT_FOUND", nf.code)
    end)
  end)

  it("moonbox sandbox create/network/info on the shell", function()
    local code, out, err = moonbox("sandbox create --timeout 60 --allow-out pypi.org --deny-out 0.0.0.0/0")
    assert.are.equal(0, code, err)
    local id = out:match("^(%S+)\n$")
    local ok, perr = pcall(function()
      code, out = moonbox("sandbox info " .. id)
      assert.truthy(out:find("\nnetwork: internet on; allowOut pypi.org; denyOut 0.0.0.0/0\n", 1, true), out)
      code, out, err = moonbox(("sandbox network %s --no-internet --allow-out 198.51.100.7 --json"):format(id))
      assert.are.equal(0, code, err)
      local j = cjson.decode(out)
      assert.are.same({ allowOut = { "198.51.100.7" }, denyOut = { "0.0.0.0/0" } }, j.network)
      assert.is_false(j.allowInternetAccess)
    end)
    moonbox("sandbox kill " .. id)
    assert(ok, perr)
  end)

  it("is enforced: what the policy allows gets out, the rest does not, and updateNetwork changes it live", function()
    if not (io.popen("id -u"):read("l") == "0") then pending("not root: no stand-in world") return end
    local world = assert(H.start_networld())
    local probe = [==[
import socket, sys
for host, port in [a.split(':') for a in sys.argv[1:]]:
    try:
        s = socket.create_connection((host, int(port)), timeout=3); s.settimeout(3)
        d = s.recv(64); print(host, 'ok' if d.startswith(b'BANNER') else 'reset')
    except Exception as e:
        print(host, type(e).__name__)
]==]
    local ok, err = pcall(with, ('deny_out = { "0.0.0.0/0" }\nallow_out = { "%s" }\n'):format(world.public), function(ctx)
      local function run()
        local h = assert(ctx.subprocess:spawn{ argv = { "python3", "-c", probe, world.public .. ":2222", "203.0.113.7:2222",
          world.private .. ":80", world.linklocal .. ":80" }, cwd = "/tmp", graceMs = 100,
          stdio = { stdin = "ignore", stdout = { maxBytes = 4096 }, stderr = { maxBytes = 4096 } } })
        assert(h:wait(30000))
        return h.collected.stdout:readFrom(0).text
      end
      local out = run()
      assert.truthy(out:find(world.public .. " ok\n", 1, true), out)
      for _, other in ipairs{ "203.0.113.7", world.private, world.linklocal } do
        assert.falsy(out:find(other .. " ok", 1, true), out)
      end
      -- the policy's rules, then none of them: the same command is refused
      assert.is_true(ctx.e2b:updateNetwork{ allowInternetAccess = false })
      out = run()
      assert.falsy(out:find(" ok", 1, true), out)
    end)
    world.stop()
    assert(ok, err)
  end)
end)