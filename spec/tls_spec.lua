-- The E2B cloud path's transport, with a CA made here: https endpoints built from E2B_DOMAIN,
-- reached through MOONBOX_CONNECT_TO (split DNS) and trusted through MOONBOX_CA_FILE; a wrong CA,
-- a certificate for another host and an expired one fail with E2B_TLS naming the host.
local H = require "support.helpers"
local mb = require "moonbox"

local DOMAIN = "sbx.moonbox.test"

local pki = require("support.pki").pki
local sh = require("support.pki").sh

describe("TLS to E2B-shaped endpoints", function()
  local dir, cert, servers = nil, nil, {}
  setup(function()
    dir = assert(io.popen("mktemp -d /tmp/moonbox-tls.XXXXXX")):read("l")
    cert = pki(dir)
  end)
  teardown(function()
    for _, s in ipairs(servers) do H.stop_server(s) end
    os.execute("rm -rf '" .. dir .. "'")
  end)

  local function serve(name, sans, days)
    local c, k = cert(name, sans, days)
    local s = H.start_server("tls_server.py", { c, k })
    servers[#servers + 1] = s
    return s
  end

  -- The client as E2B's cloud configures it: only a key and a domain (plus how to reach it).
  local function client(port, ca)
    local env = { E2B_API_KEY = "e2b_" .. ("0"):rep(40), E2B_DOMAIN = DOMAIN,
      MOONBOX_CONNECT_TO = "::127.0.0.1:" .. port, MOONBOX_CA_FILE = ca }
    return assert(require("moonbox.e2b").client{ getenv = function(n) return env[n] end })
  end

  it("reaches api.<domain> over TLS with the CA it was given, Host and SNI naming the real host", function()
    local s = serve("edge", "DNS:api." .. DOMAIN .. ",DNS:*." .. DOMAIN, 1)
    H.run(function()
      local c = client(s.port, dir .. "/ca.pem")
      assert.are.equal("https://api." .. DOMAIN, c.endpoints.api_url)
      assert.are.same({}, assert(c:list()))
      -- envd's per-sandbox host, built like the SDK's
      local e2b = require "moonbox.e2b"
      assert.are.equal("https://49983-abc." .. DOMAIN, e2b.sandbox_url(c.endpoints, "abc"))
      local envd = require("moonbox.e2b.envd").new{ url = e2b.sandbox_url(c.endpoints, "abc"), sandbox_id = "abc",
        transport = c.endpoints.transport }
      local r = assert(envd:unary("filesystem.Filesystem/Stat", { path = "/" }))
      assert.are.equal("49983-abc." .. DOMAIN, r.host)
      assert.are.equal("https://8080-abc." .. DOMAIN, c:host("abc", 8080))
    end, 30000)
  end)

  it("refuses a certificate from another CA, for another host, or expired: E2B_TLS naming the host", function()
    local good = serve("edge2", "DNS:*." .. DOMAIN .. ",DNS:api." .. DOMAIN, 1)
    local wrong_host = serve("other", "DNS:api.elsewhere.test", 1)
    local expired = serve("old", "DNS:api." .. DOMAIN, -1)
    sh(("openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=another-ca -days 2 -keyout %s/other-ca.key -out %s/other-ca.pem")
      :format(dir, dir))
    H.run(function()
      for _, case in ipairs({ { good.port, dir .. "/other-ca.pem", "issuer" },
          { wrong_host.port, dir .. "/ca.pem", "name" }, { expired.port, dir .. "/ca.pem", "expired" } }) do
        local items, err = client(case[1], case[2]):list()
        assert.is_nil(items, case[3])
        assert.are.equal("E2B_TLS", err.code, case[3] .. ": " .. tostring(err))
        assert.truthy(err.message:find("api." .. DOMAIN, 1, true), err.message)
      end
      -- no CA given: the system's trust does not know the test CA either
      local env = { E2B_API_KEY = "e2b_" .. ("0"):rep(40), E2B_DOMAIN = DOMAIN, MOONBOX_CONNECT_TO = "::127.0.0.1:" .. good.port }
      local c = assert(require("moonbox.e2b").client{ getenv = function(n) return env[n] end })
      local _, err = c:list()
      assert.are.equal("E2B_TLS", err.code)
    end, 30000)
  end)

  it("refuses a malformed connect-to rule in the composition, naming it", function()
    local compose = require "moonbox.compose"
    local _, err = compose.load("c.lua", { source = 'plugin "e2b" { connectTo = { "api.x:443" } }' })
    assert.truthy(tostring(err):find("connectTo", 1, true) and tostring(err):find("HOST:PORT:TO-HOST:TO-PORT", 1, true),
      tostring(err))
    _, err = compose.load("c.lua", { source = 'plugin "e2b" { caFile = "" }' })
    assert.truthy(tostring(err):find("caFile", 1, true), tostring(err))
    local ok, e = pcall(mb.run, function() mb.http.request{ url = "https://x", max_bytes = 1, connect_to = { "bad" } } end)
    assert.is_false(ok)
    assert.truthy(tostring(e):find("http: connect_to[1] must be HOST:PORT:TO-HOST:TO-PORT", 1, true), tostring(e))
  end)
end)
