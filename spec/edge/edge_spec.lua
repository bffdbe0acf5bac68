-- moonbox against sandboxd in edge mode (--domain, TLS with a CA made here), configured as for
-- E2B's cloud or a self-hosted E2B: E2B_API_KEY and E2B_DOMAIN, MOONBOX_CA_FILE (the CA) and
-- MOONBOX_CONNECT_TO (where *.<domain> is: the test's sandboxd), no E2B_API_URL or
-- E2B_SANDBOX_URL. scripts/test.sh runs this directory once.
local H = require "support.helpers"
local P = require "support.pki"
local cjson = require "cjson"
local mb = require "moonbox"

local D = "lua.moonbox.test"
local build = os.getenv("MB_BUILD_DIR") or "build"
local bin = build .. "/bin/moonbox"
if bin:sub(1, 1) ~= "/" then bin = assert(io.popen("pwd")):read("l") .. "/" .. bin end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

describe("moonbox on an E2B edge: sandboxd --domain with TLS #edge #sandboxd", function()
  local dir, sbxd, env
  setup(function()
    dir = assert(io.popen("mktemp -d /tmp/moonbox-edge.XXXXXX")):read("l")
    local cert = P.pki(dir)
    local c, k = cert("edge", "DNS:*." .. D .. ",DNS:" .. D, 1)
    sbxd = H.start_sandboxd{ args = { "--tls-listen", "127.0.0.1:0", "--tls-cert", c, "--tls-key", k, "--domain", D } }
    env = { E2B_API_KEY = sbxd.key, E2B_DOMAIN = D, MOONBOX_CA_FILE = dir .. "/ca.pem",
      MOONBOX_CONNECT_TO = "::127.0.0.1:" .. sbxd.tls_port }
  end)
  teardown(function()
    if sbxd then H.stop_sandboxd(sbxd) end
    if dir then os.execute("rm -rf " .. q(dir)) end
  end)

  -- moonbox with the cloud configuration only (and `over`: names to change); → status, stdout, stderr.
  local function moonbox(args, over)
    local e = {}
    for k, v in pairs(env) do e[k] = v end
    for k, v in pairs(over or {}) do e[k] = v end
    -- the configuration from a file the shell reads (dir is private): the key never on a
    -- command line (tests/secrets checks moonbox and sandboxd for the same)
    local envfile = dir .. "/moonbox.env"
    local f = assert(io.open(envfile, "w"))
    for k, v in pairs(e) do if v ~= false then f:write(k, "=", q(v), "\n") end end
    f:close()
    local out, err = os.tmpname(), os.tmpname()
    local _, _, code = os.execute(("set -a; . %s; exec env -u E2B_API_URL -u E2B_SANDBOX_URL -u MOONBOX_SANDBOXD %s %s >%s 2>%s")
      :format(q(envfile), q(bin), args, q(out), q(err)))
    local function slurp(p) local f = io.open(p); local s = f:read("a"); f:close(); os.remove(p); return s end
    return code, slurp(out), slurp(err)
  end
  -- The moonbox.e2b client in this process, with the same configuration (and `over`).
  local function client(over)
    local e = {}
    for k, v in pairs(env) do e[k] = v end
    for k, v in pairs(over or {}) do e[k] = v end
    return assert(require("moonbox.e2b").client{ getenv = function(n) return e[n] or nil end })
  end
  local function get(c, url)
    local tr = c.endpoints.transport
    return mb.http.request{ url = url, max_bytes = 10000, timeout_ms = 10000, ca_file = tr.ca_file, connect_to = tr.connect_to }
  end

  it("runs a composition: commands, files, and a port inside reached through ctx.e2b:host(port)", function()
    local code, out, err = moonbox("run spec/edge/compose.lua spec/edge/run.lua")
    assert.are.equal(0, code, out .. err)
    local id = out:match("sandbox: (i[a-z0-9]+)\n")
    assert.truthy(id, out)
    assert.truthy(out:find("command: edge-42\n", 1, true), out)
    assert.truthy(out:find("file: served to moonbox\n", 1, true), out)
    assert.truthy(out:find(("host: https://8000-%s.%s\n"):format(id, D), 1, true), out)
    assert.truthy(out:find("get: 200 served to moonbox\n", 1, true), out)
    local closed = out:match("closed: 502 ([^\n]*)\n")
    assert.truthy(closed, out)
    assert.are.same({ sandboxId = id, message = "The sandbox is running but port is not open", port = 8001, code = 502 },
      cjson.decode(closed))
    assert.is_nil(err:find("local sandboxd", 1, true))
    -- the composition's dispose deleted it
    local c = client()
    local info, ierr = H.run(function() return c:info(id) end, 20000)
    assert.is_nil(info)
    assert.are.equal("E2B_NOT_FOUND", ierr.code)
  end)

  it("moonbox sandbox list, host and kill over the edge; a paused sandbox's port answers E2B's 502", function()
    local c = client()
    local id = H.run(function() return assert(c.api:create{ timeout_ms = 120000, metadata = { edge = "cli" } }).id end, 20000)
    local code, out = moonbox("sandbox host " .. id .. " 3000")
    assert.are.same({ 0, ("https://3000-%s.%s\n"):format(id, D) }, { code, out })
    code, out = moonbox("sandbox list --metadata edge=cli --json")
    assert.are.equal(0, code)
    assert.are.equal(id, cjson.decode(out)[1].sandboxId)
    H.run(function()
      assert(c:pause(id))
      local r = assert(get(c, ("https://8000-%s.%s/"):format(id, D)))
      assert.are.equal(502, r.status)
      assert.are.same({ sandboxId = id, message = "The sandbox was not found", code = 502 }, cjson.decode(r.body))
      -- envd of a paused sandbox: the same 502, which the client reports as a sandbox not found
      local e2b = require "moonbox.e2b"
      local envd = require("moonbox.e2b.envd").new{ url = e2b.sandbox_url(c.endpoints, id), sandbox_id = id,
        transport = c.endpoints.transport }
      local res, eerr = envd:unary("filesystem.Filesystem/Stat", { path = "/" })
      assert.is_nil(res)
      assert.truthy(eerr and eerr.code, tostring(eerr))
      assert(c:resume(id))
      r = assert(get(c, ("https://8000-%s.%s/"):format(id, D)))
      assert.are.same({ 502, "The sandbox is running but port is not open" }, { r.status, cjson.decode(r.body).message })
    end, 30000)
    code, out = moonbox("sandbox kill " .. id)
    assert.are.same({ 0, "killed " .. id .. "\n" }, { code, out })
    code, out = moonbox("sandbox info " .. id)
    assert.are.equal(1, code)
  end)

  it("refuses: the edge's certificate without its CA (E2B_TLS naming api.<domain>), a wrong key, an unknown sandbox", function()
    P.sh(("openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=another-ca -days 2 -keyout %s/other.key -out %s/other.pem")
      :format(dir, dir))
    H.run(function()
      local items, err = client{ MOONBOX_CA_FILE = dir .. "/other.pem" }:list()
      assert.is_nil(items)
      assert.are.equal("E2B_TLS", err.code)
      assert.truthy(err.message:find("api." .. D, 1, true), err.message)
      items, err = client{ E2B_API_KEY = "e2b_" .. ("f"):rep(40) }:list()
      assert.is_nil(items)
      assert.are.equal("E2B_UNAUTHORIZED", err.code)
      local c = client()
      local info
      info, err = c:info("inosuchsandbox00000000")
      assert.is_nil(info)
      assert.are.equal("E2B_NOT_FOUND", err.code)
      local r = assert(get(c, "https://8000-inosuchsandbox00000000." .. D .. "/"))
      assert.are.equal(502, r.status)
      assert.are.same({ sandboxId = "inosuchsandbox00000000", message = "The sandbox was not found", code = 502 }, cjson.decode(r.body))
    end, 30000)
    local code, _, err = moonbox("sandbox list", { MOONBOX_CA_FILE = dir .. "/other.pem" })
    assert.are.equal(1, code)
    assert.truthy(err:find("E2B_TLS", 1, true) and err:find("api." .. D, 1, true), err)
  end)
end)
