-- The network policy (policies/network.lua, moonbox.policy.network) and where it goes: loaded and
-- merged per concern, every entry checked with sandboxd's parser (file:line); the create request
-- the e2b plugin makes from it; ctx.e2b:updateNetwork / client:updateNetwork (the PUT, strict
-- options, entries checked before the request); compositions (allowInternetAccess against the
-- policy, the host providers' warning). A scripted control plane; no sandboxd.
local cjson = require "cjson"
local policies = require "moonbox.policies"
local compose = require "moonbox.compose"
local fake_http = require "support.fake_http"

local function tmpdir()
  local d = os.tmpname(); os.remove(d); assert(os.execute("mkdir -p '" .. d .. "'")); return d
end
local function write(path, s) local f = assert(io.open(path, "w")); f:write(s); f:close(); return path end

describe("the network policy", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)
  local function load(src)      -- → set | nil, err, path
    local path = write(dir .. "/net.lua", src)
    local set, err = policies.load{ { files = { network = path }, via = "spec" } }
    return set, err, path
  end

  it("ships open: internet on, no lists, the request E2B gets without options", function()
    local p = policies.default("network")
    assert.are.same({ true, {}, {} }, { p.internet, p.allow_out, p.deny_out })
    assert.is_true(p.is_default())
    assert.are.same({ allowInternetAccess = true, allowOut = {}, denyOut = {}, rules = {} }, p.options())
    assert.are.equal("internet on", p.summary())
    assert.are.same({ "internet", "allow_out", "deny_out", "rules" }, policies.kinds.network.fields)
  end)

  it("merges a user's file field by field, with where each entry was written", function()
    local set, _, path = load('-- a comment\nallow_out = {\n  "pypi.org",\n  "*.pythonhosted.org",\n}\ndeny_out = { "0.0.0.0/0" }\n')
    local p = set.network
    assert.are.same({ "pypi.org", "*.pythonhosted.org" }, p.allow_out)
    assert.is_true(p.internet)                                   -- left as shipped
    assert.are.equal("default", set.origins.network.internet.kind)
    assert.are.equal(path .. ":3", p.where("allowOut", 1))
    assert.are.equal(path .. ":4", p.where("allowOut", 2))
    assert.are.equal(path .. ":6", p.where("denyOut", 1))
    assert.is_false(p.is_default())
    assert.are.equal("internet on; allow_out pypi.org, *.pythonhosted.org; deny_out 0.0.0.0/0", p.summary())
    local d = p.decide{ addr = "151.101.0.223", port = 443, name = "files.pythonhosted.org" }
    assert.are.same({ "allow-name", "allow_out", 2, "*.pythonhosted.org", path .. ":4" }, { d.verdict, d.field, d.index, d.entry, d.where })
    d = p.decide{ addr = "151.101.0.223", port = 22 }
    assert.are.same({ "deny", "deny_out", 1, path .. ":6" }, { d.verdict, d.field, d.index, d.where })
    -- dump-config's lines carry it
    local text = table.concat(set:describe(), "\n")
    assert.truthy(text:find("policy network\n     internet = true  [default (", 1, true), text)
    assert.truthy(text:find('allow_out = { "pypi.org", "*.pythonhosted.org" }  [' .. path .. ":5 (spec)]", 1, true), text)
  end)

  it("extends the shipped lists through `defaults`, and a later layer replaces a list whole", function()
    local a = write(dir .. "/a.lua", 'return { allow_out = { "a.io", table.unpack(defaults.allow_out) }, internet = false }\n')
    local b = write(dir .. "/b.lua", 'return { allow_out = { "b.io" } }\n')
    local set = assert(policies.load{ { files = { network = a }, via = "a" }, { files = { network = b }, via = "b" } })
    assert.are.same({ "b.io" }, set.network.allow_out)
    assert.is_false(set.network.internet)
    assert.are.equal(a .. ":1", set.origins.network.internet.where)
  end)

  local bad = {
    { "a prefix out of range", 'allow_out = {\n  "1.1.1.1",\n  "10.0.0.0/33",\n}\n',
      [[%s:3: network policy: field allow_out[2]: expected an address, a CIDR, a host name or a *.wildcard: "10.0.0.0/33": the prefix after '/' must be 0..32]] },
    { "a host name in deny_out", 'return {\n  deny_out = { "0.0.0.0/0",\n    "example.com" } }\n',
      [[%s:3: network policy: field deny_out[2]: expected an address or a CIDR: "example.com": host names are not supported in denyOut]] },
    { "a bare *", 'allow_out = { "*" }\n', [[%s:1: network policy: field allow_out[1]: expected an address, a CIDR, a host name or a *.wildcard: a bare "*" is not allowed]] },
    { "an unknown field, naming the nearest", 'return {\n  alow_out = {} }\n',
      "%s:2: network policy: unknown field alow_out (expected one of internet, allow_out, deny_out, rules; the nearest is allow_out)" },
    { "a wrong type", 'internet = "no"\n', [[%s:1: network policy: field internet: expected true or false, got string "no"]] },
    { "a list that is not one", 'allow_out = "pypi.org"\n', "%s:1: network policy: field allow_out: expected a list of" },
    { "a number among the entries", 'allow_out = { "a.io", 8 }\n', "%s:1: network policy: field allow_out[2]: expected an address" },
  }
  for _, c in ipairs(bad) do
    it("refuses " .. c[1] .. " in one line with file:line", function()
      local set, err, path = load(c[2])
      assert.is_nil(set)
      assert.are.equal("POLICY_INVALID", err.code)
      local want = c[3]:format(path)
      assert.truthy(err.message:find(want, 1, true), err.message .. "\nwanted: " .. want)
      assert.is_nil(err.message:find("\n", 1, true))
    end)
  end

  it("refuses more entries than sandboxd takes", function()
    local many = {}
    for i = 1, 513 do many[i] = ('"10.0.%d.%d"'):format(i // 256, i % 256) end
    local _, err = load("allow_out = { " .. table.concat(many, ", ") .. " }\n")
    assert.truthy(err.message:find("field allow_out: at most 512 entries (sandboxd's limit), got 513", 1, true), err.message)
  end)

  it("reloads: the bound rules follow the new values", function()
    local set, _, path = load('allow_out = { "a.io" }\ndeny_out = { "0.0.0.0/0" }\n')
    local p = set.network
    assert.are.equal("allow-name", p.decide{ addr = "1.2.3.4", port = 443, name = "a.io" }.verdict)
    write(path, 'internet = false\n')
    assert(set:reload())
    assert.is_false(p.internet)
    assert.are.equal("deny", p.decide{ addr = "1.2.3.4", port = 443, name = "a.io" }.verdict)
  end)
end)

describe("the e2b plugin and the network policy", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  local function comp(src, opts)
    local file = write(dir .. "/c.lua", src)
    return compose.load(file, opts or { warn = function() end })
  end

  it("builds the create request: nothing beyond today's when the policy is the default", function()
    local owner = require "moonbox.e2b.owner"
    local internet, network = owner.network_request({}, policies.defaults())
    assert.are.same({ true }, { internet })
    assert.is_nil(network)
    write(dir .. "/net.lua", 'internet = false\nallow_out = { "pypi.org" }\n')
    local set = assert(policies.load{ { files = { network = dir .. "/net.lua" }, via = "spec" } })
    internet, network = owner.network_request({}, set)
    assert.are.same({ false, { allowOut = { "pypi.org" } } }, { internet, network })
    -- the plugin's own allowInternetAccess, when the policy leaves `internet` alone
    internet = owner.network_request({ allowInternetAccess = false }, policies.defaults())
    assert.is_false(internet)
  end)

  it("refuses allowInternetAccess disagreeing with the policy's internet, naming both", function()
    write(dir .. "/net.lua", "internet = true\n")
    local c, err = comp('policies { network = "net.lua" }\nplugin "e2b" { allowInternetAccess = false }\n')
    assert.is_nil(c)
    assert.are.equal("COMPOSE_INVALID", err.code)
    assert.truthy(err.message:find('c.lua:2: plugin "e2b": allowInternetAccess = false disagrees with the network '
      .. "policy's internet = true (" .. dir .. "/net.lua:1 (" .. dir .. "/c.lua:1)): set it in one place", 1, true), err.message)
    -- agreeing, or the policy left at its default: fine
    assert.is_not_nil((comp('policies { network = "net.lua" }\nplugin "e2b" { allowInternetAccess = true }\n')))
    assert.is_not_nil((comp('plugin "e2b" { allowInternetAccess = false }\n')))
  end)

  it("warns that a composition on the host providers does not enforce a non-default policy", function()
    write(dir .. "/net.lua", 'deny_out = { "0.0.0.0/0" }\n')
    local got = {}
    local c = assert(comp('policies { network = "net.lua" }\nplugin "fs-local" {}\nplugin "subprocess-local" {}\n',
      { warn = function(m) got[#got + 1] = m end }))
    assert.are.equal(1, #got)
    assert.are.same(got, c.warnings)
    assert.truthy(got[1]:find("the network policy is NOT enforced: this composition runs on the host providers "
      .. "(fs-local, subprocess-local)", 1, true), got[1])
    assert.truthy(got[1]:find("It says: internet on; deny_out 0.0.0.0/0 [" .. dir .. "/net.lua:1 (", 1, true), got[1])
    -- the default policy on the host: nothing asked, nothing to warn about; in a sandbox: enforced
    got = {}
    c = assert(comp('plugin "fs-local" {}\n', { warn = function(m) got[#got + 1] = m end }))
    assert.are.same({}, got)
    c = assert(comp('policies { network = "net.lua" }\nplugin "e2b" {}\n', { warn = function(m) got[#got + 1] = m end }))
    assert.are.same({}, got)
    -- a reload that makes the host composition's policy say something warns then
    write(dir .. "/net2.lua", "internet = false\n")
    c = assert(comp('plugin "fs-local" {}\n', { warn = function(m) got[#got + 1] = m end }))
    assert(c.policies:reload{ network = dir .. "/net2.lua" })
    assert.are.equal(1, #got)
    assert.truthy(got[1]:find("It says: internet off", 1, true), got[1])
  end)

  it("warns that a sandbox it connects to keeps its own rules", function()
    write(dir .. "/net.lua", 'allow_out = { "pypi.org" }\ndeny_out = { "0.0.0.0/0" }\n')
    local got = {}
    local c = assert(comp('policies { network = "net.lua" }\nplugin "e2b" { sandboxId = "abc123" }\n',
      { warn = function(m) got[#got + 1] = m end }))
    assert.are.equal(1, #c.warnings)
    assert.truthy(got[1]:find("is not applied to sandbox abc123, which this composition connects to", 1, true), got[1])
  end)

  it("dump-config shows the policy and where each value came from", function()
    write(dir .. "/net.lua", 'internet = false\n')
    local c = assert(comp('policies { network = "net.lua" }\nplugin "e2b" {}\n'))
    local text = compose.describe(c)
    assert.truthy(text:find("policy network\n     internet = false  [" .. dir .. "/net.lua:1 (" .. dir .. "/c.lua:1)]", 1, true), text)
  end)
end)

describe("updateNetwork and the create request on the wire", function()
  local fake, client, api
  before_each(function()
    fake = fake_http.new()
    api = require("moonbox.e2b.api").new{ url = "http://cp.test", api_key = "e2b_00", http = fake.http }
    client = require("moonbox.e2b.client").new{ api = api, endpoints = {} }
  end)
  local function sent(i) local r = fake.log[i] return r.method .. " " .. r.url, r.body and cjson.decode(r.body) end

  it("PUTs exactly the given rules (omitted fields are cleared) and returns true on 204", function()
    fake.push{ status = 204 }
    assert.is_true(client:updateNetwork("sbx1", { allowOut = { "pypi.org", "10.0.0.0/8" }, denyOut = { "0.0.0.0/0" },
      allowInternetAccess = false }))
    local what, body = sent(1)
    assert.are.equal("PUT http://cp.test/sandboxes/sbx1/network", what)
    assert.are.same({ allowOut = { "pypi.org", "10.0.0.0/8" }, denyOut = { "0.0.0.0/0" }, allow_internet_access = false }, body)
    fake.push{ status = 204 }
    assert.is_true(client:updateNetwork("sbx1", { allowOut = {} }))
    assert.are.equal("{}", fake.log[2].body)                         -- nothing: every rule cleared
  end)

  it("maps the server's answers: 400 E2B_INVALID_ARGUMENT naming the entry, 404 naming the sandbox", function()
    fake.push{ status = 400, body = '{"code":400,"message":"allowOut[0]: \\"x.io\\": refused"}' }
    local ok, err = client:updateNetwork("sbx1", { allowOut = { "x.io" } })
    assert.is_nil(ok)
    assert.are.same({ "E2B_INVALID_ARGUMENT", 400 }, { err.code, err.status })
    assert.truthy(err.message:find('allowOut[0]: "x.io": refused', 1, true), err.message)
    fake.push{ status = 404, body = '{"code":404,"message":"not found"}' }
    ok, err = client:updateNetwork("gone1", { allowOut = { "x.io" } })
    assert.are.same({ "E2B_NOT_FOUND" }, { err.code })
    assert.truthy(err.message:find("gone1", 1, true), err.message)
    fake.push{ status = 501, body = '{"code":501,"message":"network updates are not implemented"}' }
    ok, err = client:updateNetwork("sbx1", {})
    assert.are.same({ "E2B_HTTP", 501 }, { err.code, err.status })
  end)

  it("checks entries before any request (E2B_INVALID_ARGUMENT naming the entry as sandboxd would)", function()
    local ok, err = client:updateNetwork("sbx1", { allowOut = { "pypi.org", "10.0.0.0/33" } })
    assert.is_nil(ok)
    assert.are.equal("E2B_INVALID_ARGUMENT", err.code)
    assert.are.equal([[updateNetwork: allowOut[1]: "10.0.0.0/33": the prefix after '/' must be 0..32]], err.message)
    assert.are.same({ "allowOut", 2, "10.0.0.0/33" }, { err.list, err.index, err.entry })
    _, err = client:updateNetwork("sbx1", { denyOut = { "example.com" } })
    assert.truthy(err.message:find("host names are not supported in denyOut", 1, true))
    assert.are.equal(0, #fake.log)
  end)

  it("raises for unknown options (naming the nearest) and wrong types, at the caller", function()
    local cases = {
      { { allowout = { "x.io" } }, "unknown option \"allowout\" (expected allowOut, denyOut, allowInternetAccess, rules; the nearest is allowOut)" },
      { { allowOut = "x.io" }, "allowOut must be a list of strings" },
      { { allowOut = { "x.io", 3 } }, "allowOut[2] must be a string, got number" },
      { { allowInternetAccess = "no" }, "allowInternetAccess must be a boolean" },
      { "x", "expects a table" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(function() local r = client:updateNetwork("sbx1", c[1]) return r end)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err))
      assert.truthy(tostring(err):find("network_spec.lua:", 1, true), tostring(err))   -- the caller's line
    end
    assert.is_false((pcall(client.updateNetwork, client, "bad/id", {})))
    assert.are.equal(0, #fake.log)
  end)

  it("creates with the network option only when a list holds entries, and reads it back from info", function()
    local info = cjson.encode{ sandboxID = "n1", envdVersion = "0.2.0", allowInternetAccess = false,
      network = { allowOut = { "pypi.org" }, denyOut = { "0.0.0.0/0" } } }
    fake.push{ status = 201, body = info }
    local it = assert(client:create{ allowInternetAccess = false, network = { allowOut = { "pypi.org" }, denyOut = { "0.0.0.0/0" } } })
    local _, body = sent(1)
    assert.are.same({ allowOut = { "pypi.org" }, denyOut = { "0.0.0.0/0" } }, body.network)
    assert.is_false(body.allow_internet_access)
    assert.are.same({ allowOut = { "pypi.org" }, denyOut = { "0.0.0.0/0" } }, it.network)
    assert.is_false(it.allowInternetAccess)
    fake.push{ status = 201, body = cjson.encode{ sandboxID = "n2" } }
    it = assert(client:create{ network = { allowOut = {}, denyOut = {} } })
    _, body = sent(2)
    assert.is_nil(body.network)
    assert.is_true(body.allow_internet_access)
    assert.are.same({ allowOut = {}, denyOut = {} }, it.network)      -- an older server: no rules reported
    assert.is_nil(it.allowInternetAccess)
    local ok, err = client:create{ network = { allowOut = { "exa mple.com" } } }
    assert.is_nil(ok)
    assert.are.equal("E2B_INVALID_ARGUMENT", err.code)
    assert.is_false((pcall(client.create, client, { network = { allowInternetAccess = false } })))  -- not a network field
    assert.are.equal(2, #fake.log)
  end)
end)

describe("the owner's create request and ctx.e2b:updateNetwork (scripted transport)", function()
  local fake_mb = require "support.fake_mb"
  local core = fake_http.core()
  local mb, fake, saved_find, saved_core
  local function envelope_stream(events)
    local body = {}
    for _, e in ipairs(events) do body[#body + 1] = core.envelope(0, cjson.encode(e)) end
    body[#body + 1] = core.envelope(2, "{}")
    return { status = 200, headers = { ["content-type"] = "application/connect+json" }, chunks = { table.concat(body) } }
  end
  before_each(function()
    mb = fake_mb.install()
    fake = fake_http.new()
    mb.http, mb.pstream = fake.http, fake.pstream
    saved_core = package.loaded["moonbox.core"]
    package.loaded["moonbox.core"] = saved_core or core
    local endpoints = require "moonbox.e2b.endpoints"
    saved_find = require("moonbox.binaries").find
    require("moonbox.binaries").find = function() return "/host/mbwrap" end
  end)
  after_each(function()
    require("moonbox.binaries").find = saved_find
    package.loaded["moonbox.core"] = saved_core
    fake_mb.uninstall()
  end)

  local function run_owner(set, config, fn)
    fake.push{ status = 201, body = cjson.encode{ sandboxID = "nw1", envdVersion = "0.6.3", envdAccessToken = "tok" } }
    fake.push{ status = 200, body = '[{"path":"x"}]' }
    fake.push(envelope_stream{ { event = { start = { pid = 2 } } }, { event = { ["end"] = { exited = true, status = "exit status 0" } } } })
    fake.push(envelope_stream{ { event = { start = { pid = 3 } } },
      { event = { data = { stdout = core.b64encode("/home/user\0PATH=/usr/bin\0") } } },
      { event = { ["end"] = { exited = true, status = "exit status 0" } } } })
    return mb.run(function()
      local cfg = { apiKey = "e2b_00", cwd = "/home/user/workspace", timeoutMs = 300000, envdCodec = "json" }
      for k, v in pairs(config or {}) do cfg[k] = v end
      local o = require("moonbox.e2b").new({ policies = set }, cfg)
      assert(o:sandbox())
      local r = table.pack(fn and fn(o))
      fake.push{ status = 204 }
      assert(o:dispose())
      return table.unpack(r, 1, r.n)
    end)
  end
  local function create_body() return cjson.decode(fake.log[1].body) end

  it("sends the composition's policy at create", function()
    local dir = tmpdir()
    write(dir .. "/net.lua", 'internet = false\nallow_out = { "pypi.org", "*.pythonhosted.org" }\n')
    local set = assert(policies.load{ { files = { network = dir .. "/net.lua" }, via = "spec" } })
    os.execute("rm -rf '" .. dir .. "'")
    run_owner(set)
    local body = create_body()
    assert.are.equal("POST", fake.log[1].method)
    assert.truthy(fake.log[1].url:find("/sandboxes$"), fake.log[1].url)
    assert.is_false(body.allow_internet_access)
    assert.are.same({ allowOut = { "pypi.org", "*.pythonhosted.org" } }, body.network)
  end)

  it("sends the same request as before the network policy existed when it is the default", function()
    run_owner(policies.defaults())
    local body = create_body()
    assert.is_nil(body.network)
    assert.is_true(body.allow_internet_access)
    local keys = {}
    for k in pairs(body) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.are.same({ "allow_internet_access", "autoPause", "autoResume", "secure", "templateID", "timeout" }, keys)
  end)

  it("a create the server refuses is the error of every call on the owned sandbox (no raise)", function()
    fake.push{ status = 400, body = '{"code":400,"message":"field \'network\' is not supported"}' }
    local errs = mb.run(function()
      local o = require("moonbox.e2b").new({ policies = policies.defaults() },
        { apiKey = "e2b_00", cwd = "/home/user/workspace", timeoutMs = 300000 })
      local out = {}
      for _, call in ipairs({ function() return o:updateNetwork{ allowOut = { "x.io" } } end,
          function() return o:info() end, function() return o:pause() end }) do
        local r, e = call()
        out[#out + 1] = { r, e and e.code }
      end
      assert(o:dispose())
      return out
    end)
    assert.are.same({ { nil, "E2B_HTTP" }, { nil, "E2B_HTTP" }, { nil, "E2B_HTTP" } }, errs)
    assert.are.equal(1, #fake.log)
  end)

  it("ctx.e2b:updateNetwork PUTs for the owned sandbox; a wrong option raises before any request", function()
    local ok, perr
    run_owner(policies.defaults(), nil, function(o)
      fake.push{ status = 204 }
      ok = o:updateNetwork{ allowOut = { "pypi.org" }, denyOut = { "0.0.0.0/0" } }
      perr = { pcall(function() local r = o:updateNetwork{ deny = {} } return r end) }
    end)
    assert.is_true(ok)
    local put = fake.log[5]
    assert.are.equal("PUT", put.method)
    assert.truthy(put.url:find("/sandboxes/nw1/network$"), put.url)
    assert.are.same({ allowOut = { "pypi.org" }, denyOut = { "0.0.0.0/0" } }, cjson.decode(put.body))
    assert.is_false(perr[1])
    assert.truthy(tostring(perr[2]):find('network_spec.lua:%d+: e2b: updateNetwork: unknown option "deny"'), tostring(perr[2]))
    assert.are.equal("DELETE", fake.log[6].method)                 -- no request for the bad call
  end)
end)
