-- Credentials that never enter the sandbox, moonbox's side (issue 18): the network policy's rules
-- (shape, strictness, file:line, which rule a host gets, E2B's wire form, rules no request could
-- use), the e2b owner (the create request's rules, fromEnv read before anything starts and sent
-- as a secret for that sandbox only, deleted at disposal; stored secrets checked first;
-- updateNetwork with rules; host(port) with the traffic token), the client's secret store, and
-- the command line (`moonbox secret`, `sandbox create --no-public-traffic`, `sandbox host`,
-- `policy network` with rules) against a fake control plane. No sandboxd (secrets_live_spec.lua).
local cjson = require "cjson"
local H = require "support.helpers"
local policies = require "moonbox.policies"
local compose = require "moonbox.compose"
local R = require "moonbox.policy.rules"
local fake_http = require "support.fake_http"
local cli = require "support.cli"
local tmpdir, write, q = cli.tmpdir, cli.write, cli.q

-- The value every spec below hands moonbox: it must never come back in any output.
local VALUE = "s3cr3t-value-never-shown-0123456789"

local GH = '["api.github.com"] = { headers = { Authorization = { secret = "github-token", format = "Bearer %s" } } }'
local NPM = '["*.npmjs.org"] = { headers = { Authorization = { fromEnv = "MB_SPEC_NPM_TOKEN", format = "Bearer %s" } } }'

describe("the network policy's rules", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)
  local function load(src)
    local path = write(dir .. "/net.lua", src)
    local set, err = policies.load{ { files = { network = path }, via = "spec" } }
    return set, err, path
  end

  it("loads per-host headers with each host's file:line, and shows names, never values", function()
    local set, err, path = load(table.concat({
      'allow_out = { "api.github.com", "registry.npmjs.org" }',
      'deny_out = { "0.0.0.0/0" }',
      "rules = {",
      "  " .. GH .. ",",
      "  " .. NPM .. ",",
      "}", "" }, "\n"))
    assert.is_nil(err)
    local p = set.network
    assert.are.equal(path .. ":4", p.rule_where("api.github.com"))
    assert.are.equal(path .. ":5", p.rule_where("*.npmjs.org"))
    assert.is_false(p.is_default())
    assert.truthy(p.summary():find("; rules *.npmjs.org, api.github.com", 1, true), p.summary())
    assert.are.same({ secret = "github-token", format = "Bearer %s" }, p.options().rules["api.github.com"].headers.Authorization)
    local key, _, where = p.rule_for("registry.npmjs.org")
    assert.are.same({ "*.npmjs.org", path .. ":5" }, { key, where })
    assert.is_nil(p.rule_for("npmjs.org"))                       -- a wildcard never matches the apex
    local text = table.concat(set:describe(), "\n")
    assert.truthy(text:find('fromEnv = "MB_SPEC_NPM_TOKEN"', 1, true), text)
  end)

  it("picks the exact host first, else the longest matching wildcard", function()
    local rules = {
      ["*.example.com"] = { headers = { A = { secret = "a" } } },
      ["*.api.example.com"] = { headers = { B = { secret = "b" } } },
      ["v1.api.example.com"] = { headers = { C = { secret = "c" } } },
    }
    assert.are.equal("v1.api.example.com", (R.match(rules, "V1.API.example.com.")))
    assert.are.equal("*.api.example.com", (R.match(rules, "v2.api.example.com")))
    assert.are.equal("*.example.com", (R.match(rules, "api.example.com")))
    assert.is_nil(R.match(rules, "example.com"))
    assert.is_nil(R.match(rules, "10.0.0.1"))
  end)

  it("goes to E2B as network.rules with ${e2b.secrets.NAME} placeholders", function()
    local rules = {
      ["API.GitHub.com"] = { headers = { Authorization = { secret = "github-token", format = "Bearer %s" },
        ["X-Pct"] = { secret = "p", format = "100%% %s" } } },
      ["*.npmjs.org"] = { headers = { Authorization = { fromEnv = "NPM_TOKEN" } } },
    }
    assert.is_nil(R.check(rules))
    assert.are.same({
      ["api.github.com"] = { { transform = { headers = { Authorization = "Bearer ${e2b.secrets.github-token}",
        ["X-Pct"] = "100% ${e2b.secrets.p}" } } } },
      ["*.npmjs.org"] = { { transform = { headers = { Authorization = "${e2b.secrets.mbenv-1}" } } } },
    }, R.wire(rules, function(var) assert.are.equal("NPM_TOKEN", var) return "mbenv-1" end))
    assert.are.equal("Bearer <secret github-token>", R.header_text(rules["API.GitHub.com"].headers.Authorization))
    assert.are.equal("<host variable NPM_TOKEN>", R.header_text(rules["*.npmjs.org"].headers.Authorization))
  end)

  local bad = {
    { "an address as a host", 'rules = {\n  ["10.0.0.1"] = { headers = { A = { secret = "x" } } } }\n',
      [[:2: network policy: field rules["10.0.0.1"]: key expected a host name or a *.wildcard: "10.0.0.1" is an address or a CIDR, not a host name]] },
    { "a bare *", 'rules = { ["*"] = { headers = { A = { secret = "x" } } } }\n', [[a bare "*" is not a host name]] },
    { "an unknown field, naming the nearest", 'rules = { ["a.io"] = { header = {} } }\n',
      [[field rules["a.io"]: unknown field header in a host's rule (expected headers; the nearest is headers)]] },
    { "an unknown header field", 'rules = { ["a.io"] = { headers = { A = { secert = "x" } } } }\n',
      "headers.A: unknown field secert in a header (expected secret, fromEnv, format; the nearest is secret)" },
    { "a literal value", 'rules = { ["a.io"] = { headers = { Authorization = "Bearer x" } } }\n',
      "got string (literal values are not taken: put the value in a secret)" },
    { "both sources", 'rules = { ["a.io"] = { headers = { A = { secret = "x", fromEnv = "X" } } } }\n',
      "headers.A: give exactly one of secret = NAME (the secret store) or fromEnv = VAR (a host variable)" },
    { "an upper-case secret name", 'rules = { ["a.io"] = { headers = { A = { secret = "GitHub" } } } }\n',
      [[headers.A.secret: "GitHub": secret names are lower-case (E2B stores them lower-cased): write "github"]] },
    { "a brace in a secret name", 'rules = { ["a.io"] = { headers = { A = { secret = "a}b" } } } }\n',
      [[no '{', '}' or control characters]] },
    { "a reserved prefix", 'rules = { ["a.io"] = { headers = { A = { secret = "sec_1" } } } }\n', "the sec_ prefix is reserved" },
    { "a variable name with =", 'rules = { ["a.io"] = { headers = { A = { fromEnv = "A=B" } } } }\n', [[headers.A.fromEnv: "A=B" contains '=']] },
    { "a format without %s", 'rules = { ["a.io"] = { headers = { A = { secret = "x", format = "Bearer" } } } }\n',
      "expected exactly one %s (where the value goes), found 0" },
    { "a placeholder in a format", 'rules = { ["a.io"] = { headers = { A = { secret = "x", format = "${e2b.secrets.y} %s" } } } }\n',
      "no ${...} placeholders" },
    { "a line break in a format", 'rules = { ["a.io"] = { headers = { A = { secret = "x", format = "%s\\r\\nX: y" } } } }\n',
      "a header value cannot hold control characters" },
    { "Host", 'rules = { ["a.io"] = { headers = { host = { secret = "x" } } } }\n', [["host" frames or routes the request]] },
    { "a header twice", 'rules = { ["a.io"] = { headers = { A = { secret = "x" }, a = { secret = "y" } } } }\n',
      [[headers.a: the same header as "A" (names are case-insensitive)]] },
    { "no header", 'rules = { ["a.io"] = { headers = {} } }\n', "headers: empty (a rule sets at least one header)" },
    { "a host twice", 'rules = { ["A.io"] = { headers = { A = { secret = "x" } } },\n  ["a.io."] = { headers = { A = { secret = "x" } } } }\n',
      [=[:2: network policy: field rules["a.io."]: the same host as rules["A.io"]]=] },
  }
  for _, c in ipairs(bad) do
    it("refuses " .. c[1] .. " in one line with file:line", function()
      local set, err, path = load(c[2])
      assert.is_nil(set)
      assert.are.equal("POLICY_INVALID", err.code)
      assert.truthy(err.message:find(path .. ":", 1, true), err.message)
      assert.truthy(err.message:find(c[3], 1, true), err.message .. "\nwanted: " .. c[3])
      assert.is_nil(err.message:find("\n", 1, true))
    end)
  end

  it("refuses a rule no request could use: closed policy, no allow_out name reaching its host", function()
    local _, err, path = load('deny_out = { "0.0.0.0/0" }\nallow_out = { "10.0.0.5" }\nrules = {\n  ' .. GH .. ",\n}\n")
    assert.are.equal(path .. ':4: network policy: field rules["api.github.com"]: never used: deny_out[1] is 0.0.0.0/0 '
      .. 'and no allow_out name reaches api.github.com (a rule does not allow a destination by itself): add '
      .. '"api.github.com" to allow_out (from spec)', err.message)
    _, err = load('internet = false\nrules = { ' .. NPM .. " }\n")
    assert.truthy(err.message:find("never used: internet is off and no allow_out name reaches *.npmjs.org", 1, true), err.message)
    -- an open policy, or a name that reaches the host (a wildcard, or a subdomain of a wildcard rule)
    assert.is_not_nil((load("rules = { " .. GH .. " }\n")))
    assert.is_not_nil((load('internet = false\nallow_out = { "*.github.com" }\nrules = { ' .. GH .. " }\n")))
    assert.is_not_nil((load('internet = false\nallow_out = { "registry.npmjs.org" }\nrules = { ' .. NPM .. " }\n")))
    assert.is_not_nil((load('internet = false\nallow_out = { "*.org" }\nrules = { ' .. NPM .. " }\n")))
    assert.is_nil((load('internet = false\nallow_out = { "npmjs.org" }\nrules = { ' .. NPM .. " }\n")))   -- the apex only
  end)

  it("merges host by host over the layers below, false removing a host", function()
    local a = write(dir .. "/a.lua", "rules = { " .. GH .. ", " .. NPM .. " }\n")
    local b = write(dir .. "/b.lua", 'rules = { ["*.npmjs.org"] = false }\n')
    local set = assert(policies.load{ { files = { network = a }, via = "a" }, { files = { network = b }, via = "b" } })
    assert.are.same({ "api.github.com" }, (function() local k = {} for h in pairs(set.network.rules) do k[#k + 1] = h end return k end)())
  end)

  it("the e2b plugin's allowInternetAccess = false closes the policy: its unused rules are refused too", function()
    write(dir .. "/net.lua", "rules = { " .. GH .. " }\n")
    local c, err = compose.load(write(dir .. "/c.lua", 'policies { network = "net.lua" }\nplugin "e2b" { allowInternetAccess = false }\n'),
      { warn = function() end })
    assert.is_nil(c)
    assert.are.equal("COMPOSE_INVALID", err.code)
    assert.truthy(err.message:find('rules["api.github.com"] (' .. dir .. '/net.lua:1) is never used: allowInternetAccess is false', 1, true), err.message)
  end)

  it("a sandbox the composition connects to keeps its rules (a warning)", function()
    write(dir .. "/net.lua", "rules = { " .. GH .. " }\n")
    local c = assert(compose.load(write(dir .. "/c.lua", 'policies { network = "net.lua" }\nplugin "e2b" { sandboxId = "abc1" }\n'),
      { warn = function() end }))
    assert.truthy(c.warnings[1]:find("rules api.github.com) is not applied to sandbox abc1", 1, true), c.warnings[1])
  end)
end)

describe("the owner: rules at create, host variables as scoped secrets, the traffic token (scripted transport)", function()
  local fake_mb = require "support.fake_mb"
  local core = fake_http.core()
  local mb, fake, saved_find, saved_core, dir
  local function envelope_stream(events)
    local body = {}
    for _, e in ipairs(events) do body[#body + 1] = core.envelope(0, cjson.encode(e)) end
    body[#body + 1] = core.envelope(2, "{}")
    return { status = 200, headers = { ["content-type"] = "application/connect+json" }, chunks = { table.concat(body) } }
  end
  before_each(function()
    dir = tmpdir()
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
    os.execute("rm -rf " .. q(dir))
  end)

  local ENV = { MB_SPEC_NPM_TOKEN = VALUE, E2B_API_KEY = "e2b_00", E2B_API_URL = "http://cp.test", E2B_SANDBOX_URL = "http://cp.test" }
  local function getenv(name) return ENV[name] end
  local function set_of(src)
    write(dir .. "/net.lua", src)
    return assert(policies.load{ { files = { network = dir .. "/net.lua" }, via = "spec" } })
  end
  local function secret_json(name, md) return cjson.encode{ secretID = "sec_1", name = name, currentVersion = 1, metadata = md or {} } end
  local function push_setup(create)
    fake.push{ status = 201, body = cjson.encode(create or { sandboxID = "nw1", envdVersion = "0.6.3", envdAccessToken = "tok" }) }
  end
  local function push_prepare()
    fake.push{ status = 200, body = '[{"path":"x"}]' }
    fake.push(envelope_stream{ { event = { start = { pid = 2 } } }, { event = { ["end"] = { exited = true, status = "exit status 0" } } } })
    fake.push(envelope_stream{ { event = { start = { pid = 3 } } },
      { event = { data = { stdout = core.b64encode("/home/user\0PATH=/usr/bin\0") } } },
      { event = { ["end"] = { exited = true, status = "exit status 0" } } } })
  end
  local function owner(set, config)
    local cfg = { cwd = "/home/user/workspace", timeoutMs = 300000, envdCodec = "json" }
    for k, v in pairs(config or {}) do cfg[k] = v end
    return require("moonbox.e2b").new({ policies = set, getenv = getenv }, cfg)
  end
  local function req(i) local r = fake.log[i] return r.method .. " " .. r.url:gsub("^http://cp.test", ""), r.body and cjson.decode(r.body) end

  it("checks the stored secret, creates with placeholders, then makes the variable's secret for that sandbox only", function()
    local set = set_of('allow_out = { "api.github.com", "registry.npmjs.org" }\ndeny_out = { "0.0.0.0/0" }\nrules = {\n  '
      .. GH .. ",\n  " .. NPM .. ",\n}\n")
    fake.push{ status = 200, body = secret_json("github-token") }          -- GET /secrets/github-token
    push_setup()
    fake.push{ status = 201, body = secret_json("mbenv-x", { ["sandboxd.sandbox"] = "nw1" }) }
    push_prepare()
    local url, headers
    mb.run(function()
      local o = assert(owner(set))
      assert(o:sandbox())
      url, headers = o:host(8080)
      fake.push{ status = 204 }                                             -- DELETE the sandbox
      fake.push{ status = 204 }                                             -- DELETE the secret
      assert(o:dispose())
    end)
    local what, body = req(1)
    assert.are.equal("GET /secrets/github-token", what)
    what, body = req(2)
    assert.are.equal("POST /sandboxes", what)
    local rules = body.network.rules
    assert.are.equal("Bearer ${e2b.secrets.github-token}", rules["api.github.com"][1].transform.headers.Authorization)
    local env_secret = rules["*.npmjs.org"][1].transform.headers.Authorization:match("^Bearer %${e2b%.secrets%.(mbenv%-%x+)}$")
    assert.truthy(env_secret, cjson.encode(rules))
    assert.is_nil(body.network.allowPublicTraffic)
    what, body = req(3)
    assert.are.same({ "POST /secrets", { name = env_secret, value = VALUE, metadata = { ["sandboxd.sandbox"] = "nw1" } } }, { what, body })
    assert.are.equal("DELETE /sandboxes/nw1", (req(#fake.log - 1)))
    assert.are.equal("DELETE /secrets/" .. env_secret, (req(#fake.log)))
    -- the value went in that one body and nowhere else
    for i, r in ipairs(fake.log) do
      if i ~= 3 then assert.falsy(tostring(r.body or ""):find(VALUE, 1, true), r.url) end
      assert.falsy(r.url:find(VALUE, 1, true))
    end
    assert.are.equal("http://cp.test/_sandbox/nw1/8080/", url)
    assert.are.same({}, headers)
  end)

  it("an unset variable stops the start before anything is made, naming it and the rule", function()
    local set = set_of("rules = {\n  " .. NPM .. ",\n}\n")
    local saved = ENV.MB_SPEC_NPM_TOKEN
    ENV.MB_SPEC_NPM_TOKEN = ""
    local o, err = mb.run(function() return owner(set) end)
    ENV.MB_SPEC_NPM_TOKEN = saved
    assert.is_nil(o)
    assert.are.equal("E2B_CONFIG", err.code)
    assert.are.equal(('network policy rules["*.npmjs.org"].headers.Authorization (%s/net.lua:2): fromEnv MB_SPEC_NPM_TOKEN '
      .. "is not set on this host (or empty): set it, or remove the rule"):format(dir), err.message)
    assert.are.equal(0, #fake.log)
    -- a value a header cannot carry: refused without quoting it
    ENV.MB_SPEC_NPM_TOKEN = VALUE .. "\nX-Evil: 1"
    o, err = mb.run(function() return owner(set) end)
    ENV.MB_SPEC_NPM_TOKEN = saved
    assert.is_nil(o)
    assert.truthy(err.message:find("fromEnv MB_SPEC_NPM_TOKEN: its value holds a line feed at byte 36: a header value cannot", 1, true), err.message)
    assert.falsy(err.message:find(VALUE, 1, true))
  end)

  it("a secret the store does not hold stops the start before the create; on the embedded sandboxd, before anything", function()
    local set = set_of("rules = { " .. GH .. " }\n")
    fake.push{ status = 404, body = '{"code":404,"message":"secret not found"}' }
    local err = mb.run(function()
      local o = assert(owner(set))
      local _, e = o:sandbox()
      assert(o:dispose())
      return e
    end)
    assert.are.equal("E2B_NOT_FOUND", err.code)
    assert.truthy(err.message:find('rules["api.github.com"].headers.Authorization (' .. dir .. "/net.lua:1): secret github-token "
      .. "is not in the secret store of http://cp.test (moonbox secret set github-token)", 1, true), err.message)
    assert.are.equal(1, #fake.log)
    local saved = ENV
    ENV = { MB_SPEC_NPM_TOKEN = VALUE }                                     -- no endpoint: the embedded sandboxd
    local o, cerr = mb.run(function() return owner(set) end)
    ENV = saved
    assert.is_nil(o)
    assert.are.equal("E2B_CONFIG", cerr.code)
    assert.truthy(cerr.message:find("the embedded sandboxd starts with an empty secret store for each run: use fromEnv", 1, true), cerr.message)
  end)

  it("a variable's secret the server refuses: the sandbox is deleted again and the error says which variable", function()
    local set = set_of("rules = { " .. NPM .. " }\n")
    push_setup()
    fake.push{ status = 501, body = '{"code":501,"message":"secrets are not implemented"}' }
    fake.push{ status = 204 }                                               -- DELETE the sandbox
    local err = mb.run(function()
      local o = assert(owner(set))
      local _, e = o:sandbox()
      assert(o:dispose())
      return e
    end)
    assert.are.same({ "E2B_HTTP", 501 }, { err.code, err.status })
    assert.truthy(err.message:find("the secret for host variable MB_SPEC_NPM_TOKEN (sandbox nw1): POST /secrets: 501", 1, true), err.message)
    assert.falsy(err.message:find(VALUE, 1, true))
    assert.are.equal("DELETE /sandboxes/nw1", (req(3)))
    assert.are.equal(3, #fake.log)
  end)

  it("updateNetwork with rules: a new secret per variable, the PUT, then the previous secrets deleted", function()
    local set = set_of("rules = { " .. NPM .. " }\n")
    push_setup()
    fake.push{ status = 201, body = secret_json("mbenv-a") }
    push_prepare()
    local r1, r2, perr
    mb.run(function()
      local o = assert(owner(set))
      assert(o:sandbox())
      fake.push{ status = 201, body = secret_json("mbenv-b") }              -- the new secret
      fake.push{ status = 204 }                                             -- the PUT
      fake.push{ status = 204 }                                             -- DELETE the first secret
      r1 = o:updateNetwork(set.network.options())
      fake.push{ status = 204 }                                             -- the PUT
      fake.push{ status = 204 }                                             -- DELETE the second secret
      r2 = o:updateNetwork{ allowOut = { "x.io" }, rules = { ["x.io"] = { headers = { A = { secret = "gone" } } } } }
      perr = { pcall(function() local r = o:updateNetwork{ rules = { ["x.io"] = { headers = { A = { secrt = "x" } } } } } return r end) }
      fake.push{ status = 204 }                                             -- DELETE the sandbox, and no secret is left
      assert(o:dispose())
    end)
    assert.is_true(r1)
    local first = req(2):match("POST /secrets") and cjson.decode(fake.log[2].body).name
    local _, nb = req(6)
    assert.are.equal("POST /secrets", (req(6)))
    assert.are.equal(VALUE, nb.value)
    assert.are.equal("nw1", nb.metadata["sandboxd.sandbox"])
    local what, put = req(7)
    assert.are.equal("PUT /sandboxes/nw1/network", what)
    assert.are.equal("Bearer ${e2b.secrets." .. nb.name .. "}", put.rules["*.npmjs.org"][1].transform.headers.Authorization)
    assert.are.equal("DELETE /secrets/" .. first, (req(8)))
    -- the second update needs no secret of ours: the PUT, then the secret of the first deleted
    assert.is_true(r2)
    assert.are.equal("PUT /sandboxes/nw1/network", (req(9)))
    assert.are.equal("DELETE /secrets/" .. nb.name, (req(10)))
    assert.are.equal("DELETE /sandboxes/nw1", (req(11)))
    assert.are.equal(11, #fake.log)
    assert.is_false(perr[1])
    assert.truthy(tostring(perr[2]):find('secrets_spec.lua:%d+: e2b: updateNetwork: rules%["x.io"%].headers.A: unknown field secrt'), tostring(perr[2]))
  end)

  it("allowPublicTraffic = false: host(port) → the URL and the e2b-traffic-access-token header", function()
    local set = set_of("")
    push_setup{ sandboxID = "nw1", envdVersion = "0.6.3", envdAccessToken = "tok", trafficAccessToken = "tat-1" }
    push_prepare()
    local url, headers, info
    mb.run(function()
      local o = assert(owner(set, { allowPublicTraffic = false }))
      assert(o:sandbox())
      url, headers = o:host(3000)
      fake.push{ status = 200, body = cjson.encode{ sandboxID = "nw1", trafficAccessToken = "tat-1",
        network = { allowPublicTraffic = false, rules = { ["a.io"] = { { transform = { headers = { A = "Bearer ${e2b.secrets.k}", B = "Bearer x" } } } } } } } }
      info = assert(o:info())
      fake.push{ status = 204 }
      assert(o:dispose())
    end)
    local _, body = req(1)
    assert.are.same({ allowPublicTraffic = false }, body.network)
    assert.are.equal("http://cp.test/_sandbox/nw1/3000/", url)
    assert.are.same({ ["e2b-traffic-access-token"] = "tat-1" }, headers)
    assert.are.equal("tat-1", info.trafficAccessToken)
    assert.is_false(info.network.allowPublicTraffic)
    -- a header value is shown by its secret's name; a literal is hidden
    assert.are.same({ A = "Bearer <secret k>", B = "<hidden: 8 bytes>" }, info.network.rules["a.io"][1].transform.headers)
  end)
end)

describe("the client's secret store (scripted transport)", function()
  local fake, c
  before_each(function()
    fake = fake_http.new()
    local api = require("moonbox.e2b.api").new{ url = "http://cp.test", api_key = "e2b_00", http = fake.http }
    c = require("moonbox.e2b.client").new{ api = api, endpoints = {} }
  end)

  it("sets (create, or a new version on 409), reads, lists every page and deletes", function()
    fake.push{ status = 409, body = '{"code":409,"message":"exists"}' }
    fake.push{ status = 200, body = cjson.encode{ secretID = "sec_1", name = "k", currentVersion = 2, metadata = {},
      createdAt = "2025-01-01T00:00:00Z", updatedAt = "2025-01-02T00:00:00Z" } }
    local s, how = c:setSecret("k", VALUE, { metadata = { team = "a" } })
    assert.are.same({ "updated", 2, "sec_1" }, { how, s.version, s.secretId })
    assert.are.same({ "POST", "http://cp.test/secrets/k" }, { fake.log[2].method, fake.log[2].url })
    assert.are.same({ value = VALUE, metadata = { team = "a" } }, cjson.decode(fake.log[2].body))
    fake.push{ status = 200, headers = { ["x-next-token"] = "2" }, body = '[{"name":"a","currentVersion":1},{"name":"b","currentVersion":1}]' }
    fake.push{ status = 200, body = '[{"name":"c","currentVersion":3,"metadata":null}]' }
    local all = assert(c:listAllSecrets{ limit = 2 })
    assert.are.same({ "a", "b", "c" }, { all[1].name, all[2].name, all[3].name })
    assert.are.same({}, all[3].metadata)
    assert.are.equal("http://cp.test/secrets?limit=2&nextToken=2", fake.log[4].url)
    fake.push{ status = 404, body = '{"code":404,"message":"nope"}' }
    assert.is_false(c:secretExists("zz"))
    fake.push{ status = 404, body = '{"code":404,"message":"nope"}' }
    assert.is_false(c:deleteSecret("zz"))
    fake.push{ status = 204 }
    assert.is_true(c:deleteSecret("k"))
  end)

  it("refuses a bad name or value before any request, never quoting the value; wrong types raise", function()
    local _, err = c:createSecret("Big", VALUE)
    assert.are.equal("E2B_INVALID_ARGUMENT", err.code)
    _, err = c:setSecret("k", VALUE .. "\r\n")
    assert.are.equal("setSecret k: the value holds a carriage return at byte 36: a header value cannot", err.message)
    _, err = c:setSecret("k", "")
    assert.truthy(err.message:find("the value is empty", 1, true))
    assert.has_error(function() c:setSecret("k", 5) end, "e2b: setSecret: the value must be a string")
    assert.has_error(function() c:setSecret("k", "v", { meta = {} }) end, 'e2b: setSecret: unknown option "meta" (expected metadata)')
    assert.are.equal(0, #fake.log)
  end)

  it("takes rules on create and updateNetwork (stored secrets only: fromEnv needs an owner)", function()
    fake.push{ status = 201, body = cjson.encode{ sandboxID = "n1", trafficAccessToken = "tat" } }
    local it = assert(c:create{ network = { allowOut = { "a.io" }, allowPublicTraffic = false,
      rules = { ["a.io"] = { headers = { Authorization = { secret = "k", format = "token %s" } } } } } })
    assert.are.same({ allowOut = { "a.io" }, allowPublicTraffic = false,
      rules = { ["a.io"] = { { transform = { headers = { Authorization = "token ${e2b.secrets.k}" } } } } } },
      cjson.decode(fake.log[1].body).network)
    assert.are.equal("tat", it.trafficAccessToken)
    local url, headers = c:host("n1", 80, "sbx.test", it.trafficAccessToken)
    assert.are.same({ "https://80-n1.sbx.test", { ["e2b-traffic-access-token"] = "tat" } }, { url, headers })
    local ok, err = c:updateNetwork("n1", { rules = { ["a.io"] = { headers = { A = { secret = "Bad" } } } } })
    assert.is_nil(ok)
    assert.are.equal("E2B_INVALID_ARGUMENT", err.code)
    assert.truthy(err.message:find('updateNetwork: rules["a.io"].headers.A.secret: "Bad": secret names are lower-case', 1, true), err.message)
    assert.has_error(function() c:updateNetwork("n1", { rules = { ["a.io"] = { headers = { A = { fromEnv = "X" } } } } }) end)
    assert.are.equal(1, #fake.log)
  end)
end)

describe("moonbox secret, sandbox host and policy network with rules (a fake control plane)", function()
  local srv, env, dir
  setup(function()
    srv = H.start_server("fake_api.py")
    env = ("E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=e2b_%s"):format(srv.url, srv.url, ("0"):rep(40))
  end)
  teardown(function() H.stop_server(srv) end)
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)
  local function moonbox(args, o)
    o = o or {}
    return cli.moonbox(args .. (o.stdin and (" <" .. q(o.stdin)) or ""), { dir = o.dir or dir,
      prefix = cli.NO_E2B .. " MB_SPEC_NPM_TOKEN=" .. VALUE .. " " .. (o.env or env), stdin_null = not o.stdin })
  end
  local function stored()
    local res = H.run(function() return assert(require("moonbox").http.request{ url = srv.url .. "/_secrets", max_bytes = 1 << 20 }) end)
    return cjson.decode(res.body)
  end
  local function never_shown(...)
    for _, s in ipairs({ ... }) do assert.falsy(s:find(VALUE, 1, true), s) end
  end

  it("set: the value from stdin or a file (one trailing line break dropped), a new version when it exists", function()
    write(dir .. "/v", VALUE .. "\n")
    local code, out, err = moonbox("secret set gh-token", { stdin = dir .. "/v" })
    assert.are.same({ 0, "created secret gh-token (version 1)\n", "" }, { code, out, err })
    assert.are.equal(VALUE, stored()["gh-token"])
    write(dir .. "/w", VALUE .. "2")
    code, out, err = moonbox("secret set gh-token --from-file w --metadata team=a --json")
    assert.are.equal(0, code, err)
    local j = cjson.decode(out)
    assert.are.same({ "updated", "gh-token", 2, { team = "a" } }, { j.action, j.name, j.version, j.metadata })
    assert.are.equal(VALUE .. "2", stored()["gh-token"])
    never_shown(out, err)
  end)

  it("list, info and delete; never a value; an unknown name is one line, exit 1", function()
    write(dir .. "/v", VALUE)
    assert.are.equal(0, (moonbox("secret set a-one", { stdin = dir .. "/v" })))
    assert.are.equal(0, (moonbox("secret set b-two --metadata k=v", { stdin = dir .. "/v" })))
    local code, out, err = moonbox("secret list")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("^NAME%s+VERSION%s+UPDATED%s+METADATA\n"), out)
    assert.truthy(out:find("\na%-one%s+1%s"), out)
    assert.truthy(out:find("\nb%-two%s+1%s+%S+%s+k=v\n"), out)
    code, out = moonbox("secret list --json")
    local names = {}
    for _, s in ipairs(cjson.decode(out)) do names[s.name] = s.version end
    assert.are.equal(1, names["a-one"])
    code, out = moonbox("secret info b-two")
    assert.are.equal(0, code)
    assert.truthy(out:find("^b%-two\nversion 1, created [^,]+, updated [^,]+, metadata k=v\n$"), out)
    never_shown(out)
    code, out, err = moonbox("secret delete a-one b-two")
    assert.are.same({ 0, "deleted a-one\ndeleted b-two\n" }, { code, out }, err)
    code, out, err = moonbox("secret info a-one")
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:match("^moonbox: E2B_NOT_FOUND: secret a%-one not found: [^\n]*\n$"), err)
    code, _, err = moonbox("secret delete a-one")
    assert.are.same({ 1, "moonbox: E2B_NOT_FOUND: secret a-one not found\n" }, { code, err })
  end)

  it("usage mistakes: exit 2 before any request; a value on the command line is refused", function()
    write(dir .. "/v", VALUE)
    for _, c in ipairs({
      { "secret set k " .. VALUE, "a value is never taken from the command line (every local user can read it)" },
      { "secret set GitHub", 'secret set: "GitHub": secret names are lower-case' },
      { "secret set", "secret set: which secret?" },
      { "secret set k --from-file v --prompt", "give --from-file or --prompt, not both" },
      { "secret set k --prompt", "--prompt reads from a terminal, and stdin is not one" },
      { "secret set k --metadata x", "--metadata x: expected KEY=VALUE" },
      { "secret frob", "secret: unknown subcommand frob (expected set, list, info or delete)" },
      { "secret info a b", "secret info: unexpected argument b" },
    }) do
      local code, out, err = moonbox(c[1], { stdin = dir .. "/v" })
      assert.are.equal(2, code, c[1] .. ": " .. err)
      assert.are.equal("", out)
      assert.truthy(err:find(c[2], 1, true), err)
      -- one line: what was wrong, then where the command's usage is
      assert.truthy(err:match("^moonbox: secret[^\n]+; run 'moonbox secret[%a ]* %-%-help' for usage\n$"), err)
      if c[1]:find(VALUE, 1, true) == nil then never_shown(err) end
    end
    write(dir .. "/crlf", "a\r\nb")
    local code, _, err = moonbox("secret set k --from-file crlf")
    assert.are.equal(2, code)
    assert.truthy(err:find("secret set: the value holds a carriage return at byte 2: a header value cannot (from crlf)", 1, true), err)
    code, _, err = moonbox("secret set k", { stdin = "/dev/null" })
    assert.are.equal(2, code)
    assert.truthy(err:find("the value is empty (from stdin)", 1, true), err)
    assert.is_nil(stored().k)
  end)

  it("a terminal: refused without --prompt; with it, the value is read unechoed", function()
    -- python's pty drives moonbox on a terminal: → exit status, everything the terminal showed
    local driver = [==[
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
shown, sent = b"", False
while True:
    try:
        d = os.read(fd, 1024)
    except OSError:
        break
    if not d:
        break
    shown += d
    if not sent and b"(not echoed): " in shown:
        os.write(fd, os.environ["MB_SPEC_TYPED"].encode() + b"\n")
        sent = True
_, st = os.waitpid(pid, 0)
sys.stdout.write(str(os.WEXITSTATUS(st)) + "\n" + shown.decode(errors="replace"))
]==]
    write(dir .. "/on_tty.py", driver)
    local function on_tty(args)
      local p = assert(io.popen(("cd %s && %s %s MB_SPEC_TYPED=%s python3 on_tty.py %s %s"):format(q(dir), cli.NO_E2B, env, VALUE,
        q(cli.bin), args)))
      local out = p:read("a")
      p:close()
      local status, shown = out:match("^(%d+)\n(.*)$")
      return tonumber(status), shown
    end
    local status, shown = on_tty("secret set typed")
    assert.are.equal(2, status)
    assert.truthy(shown:find("stdin is a terminal: pipe the value in, give --from-file F, or --prompt to type it unechoed", 1, true), shown)
    status, shown = on_tty("secret set typed --prompt")
    assert.are.same({ 0, "value (not echoed): \r\ncreated secret typed (version 1)\r\n" }, { status, shown })
    assert.are.equal(VALUE, stored().typed)
  end)

  it("without an endpoint (and the background sandboxd neither running nor to be started): one line", function()
    local code, out, err = moonbox("secret list", { env = "MOONBOX_SANDBOXD_AUTOSTART=0 XDG_RUNTIME_DIR=" .. q(dir) })
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("^moonbox: E2B_CONFIG: no E2B endpoint: [^\n]*start a local one with `moonbox sandboxd start`[^\n]*; "
      .. "the embedded sandboxd of `moonbox run` lives for one run and keeps no secrets across runs\n$"), err)
  end)

  it("sandbox create --no-public-traffic; sandbox host prints the URL and the header to pass", function()
    local code, out, err = moonbox("sandbox create --no-public-traffic --json")
    assert.are.equal(0, code, err)
    local it = cjson.decode(out)
    assert.are.equal("tat-" .. it.sandboxId, it.trafficAccessToken)
    code, out, err = moonbox("sandbox host " .. it.sandboxId .. " 8080")
    assert.are.same({ 0, ("%s/_sandbox/%s/8080/\ne2b-traffic-access-token: tat-%s\n"):format(srv.url, it.sandboxId, it.sandboxId), "" },
      { code, out, err })
    -- getInfo has no token: a connect of 1 s gave it (a connect never shortens a lease)
    local all = cjson.decode(H.run(function()
      return assert(require("moonbox").http.request{ url = srv.url .. "/_requests", max_bytes = 1 << 20 }) end).body)
    assert.are.same({ method = "POST", path = "/sandboxes/" .. it.sandboxId .. "/connect", body = { timeout = 1 } }, all[#all])
    code, out = moonbox("sandbox host " .. it.sandboxId .. " 8080 --json")
    assert.are.same({ url = ("%s/_sandbox/%s/8080/"):format(srv.url, it.sandboxId), allowPublicTraffic = false,
      headers = { ["e2b-traffic-access-token"] = "tat-" .. it.sandboxId } }, cjson.decode(out))
    code, out = moonbox("sandbox info " .. it.sandboxId)
    assert.truthy(out:find("; ports need e2b-traffic-access-token\n", 1, true), out)
    -- a public sandbox: the URL alone
    _, out = moonbox("sandbox create")
    local id = out:match("^(%S+)")
    code, out = moonbox("sandbox host " .. id .. " 80")
    assert.are.same({ 0, ("%s/_sandbox/%s/80/\n"):format(srv.url, id) }, { code, out })
  end)

  it("policy network lists the rules and each check's headers, by name and source, never a value", function()
    write(dir .. "/net.lua", table.concat({
      'allow_out = { "api.github.com", "registry.npmjs.org" }',
      'deny_out = { "0.0.0.0/0" }',
      "rules = {",
      "  " .. GH .. ",",
      "  " .. NPM .. ",",
      "}", "" }, "\n"))
    local args = "policy network --policy network=net.lua --resolve api.github.com=140.82.112.6 "
      .. "--resolve registry.npmjs.org=104.16.1.34 --resolve pypi.org=151.101.0.223 --check https://api.github.com/user "
      .. "--check registry.npmjs.org --check http://pypi.org --check 140.82.112.6:443 --check ssh://api.github.com"
    local code, out, err = moonbox(args)
    assert.are.equal(1, code, err)
    for _, want in ipairs({
      "  rules         *.npmjs.org         net.lua:5\n                  Authorization: Bearer <host variable MB_SPEC_NPM_TOKEN>\n"
        .. "  rules         api.github.com      net.lua:4\n                  Authorization: Bearer <secret github-token>\n"
        .. "header values never enter the sandbox:",
      '  => allowed\n  headers, by rules["api.github.com"] (net.lua:4):\n    Authorization: Bearer <secret github-token>\n',
      '  => allowed\n  headers, by rules["*.npmjs.org"] (net.lua:5):\n    Authorization: Bearer <host variable MB_SPEC_NPM_TOKEN>\n',
      "  => denied: the sandbox cannot look the name up\n  headers: none (no rule matches pypi.org)\n",
      "  headers: none (a rule matches host names, and a request to a bare address names none)\n",
      "  => denied\n  headers: none (rules apply to HTTP on port 80 and HTTPS on 443 only)\n",
    }) do
      assert.truthy(out:find(want, 1, true), "missing:\n" .. want .. "\nin:\n" .. out)
    end
    assert.falsy(out:find("is not set here", 1, true), out)
    never_shown(out, err)
    code, out = moonbox(args .. " --json")
    local j = cjson.decode(out)
    assert.are.same({ host = "api.github.com", where = "net.lua:4", headers = { { name = "Authorization",
      secret = "github-token", format = "Bearer %s" } } }, j.rules[2])
    assert.is_true(j.rules[1].headers[1].setHere)
    assert.are.same({ rule = "*.npmjs.org", where = "net.lua:5", headers = { { name = "Authorization",
      fromEnv = "MB_SPEC_NPM_TOKEN", format = "Bearer %s", text = "Bearer <host variable MB_SPEC_NPM_TOKEN>" } } }, j.checks[2].headers)
    never_shown(out)
    -- unset here: said, not an error here
    code, out = moonbox(args, { env = env .. " MB_SPEC_NPM_TOKEN=" })
    assert.truthy(out:find("  MB_SPEC_NPM_TOKEN is not set here: a sandbox with this policy would not start\n", 1, true), out)
    -- dump-config shows the names too
    write(dir .. "/c.lua", 'policies { network = "net.lua" }\nplugin "e2b" {}\n')
    code, out, err = moonbox("dump-config c.lua")
    assert.are.equal(0, code, err)
    assert.truthy(out:find('secret = "github-token"', 1, true), out)
    never_shown(out, err)
  end)

  it("moonbox run: an unset variable stops the run before anything starts, in one line", function()
    write(dir .. "/net.lua", "rules = { " .. NPM .. " }\n")
    write(dir .. "/c.lua", 'policies { network = "net.lua" }\nplugin "e2b" {}\nplugin "subprocess" {}\n')
    write(dir .. "/s.lua", "io.write('ran')\n")
    local before = #cjson.decode(H.run(function()
      return assert(require("moonbox").http.request{ url = srv.url .. "/_requests", max_bytes = 1 << 20 }) end).body)
    local code, out, err = moonbox("run c.lua s.lua", { env = env .. " MB_SPEC_NPM_TOKEN=" })
    assert.are.same({ 1, "" }, { code, out })
    assert.are.equal('moonbox: E2B_CONFIG: network policy rules["*.npmjs.org"].headers.Authorization (net.lua:1): fromEnv '
      .. "MB_SPEC_NPM_TOKEN is not set on this host (or empty): set it, or remove the rule\n", err)
    local after = #cjson.decode(H.run(function()
      return assert(require("moonbox").http.request{ url = srv.url .. "/_requests", max_bytes = 1 << 20 }) end).body)
    assert.are.equal(before, after)
  end)
end)
