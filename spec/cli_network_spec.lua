-- `moonbox policy network` (what a network policy allows, which rule decides each check; no
-- sandbox), the host providers' warning from `moonbox run`, and `moonbox sandbox create/network/
-- info` with the network options against a fake control plane (spec/support/fake_api.py).
local H = require "support.helpers"
local cjson = require "cjson"
local ROOT = assert(io.popen("pwd")):read("l")

local cli = require "support.cli"
local bin = cli.bin
local tmpdir, write, q = cli.tmpdir, cli.write, cli.q

-- → exit status, stdout, stderr. env: extra "NAME=VALUE ..." (E2B_* are unset unless given)
local function moonbox(args, dir, env)
  return cli.moonbox(args, { dir = dir or ".", prefix = cli.NO_E2B .. " " .. (env or "") })
end

local function count(s, pat) return select(2, s:gsub(pat, "")) end

describe("moonbox policy network", function()
  local dir
  before_each(function()
    dir = tmpdir()
    write(dir .. "/net.lua", [[
-- the package index, its files and one LAN host; nothing else
allow_out = {
  "pypi.org",
  "*.pythonhosted.org",
  "10.0.0.5",
}
deny_out = { "0.0.0.0/0" }
]])
  end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  it("prints the shipped policy and the safe defaults, exit 0", function()
    local code, out, err = moonbox("policy network")
    assert.are.same({ 0, "" }, { code, err })
    local want = table.concat({
      "network policy: defaults",
      "enforced outside the sandbox by sandboxd (or E2B), sent with each sandbox the e2b plugin creates",
      "  internet      on                  default (policies/network.lua:24)",
      "  allow_out     (none)              default (policies/network.lua:27)",
      "  deny_out      (none)              default (policies/network.lua:31)",
      "DNS in the sandbox: answers every name",
      "safe defaults (sandboxd's, over every rule):", "" }, "\n")
    assert.are.equal(want, out:sub(1, #want))
    assert.truthy(out:find("link-local (169.254.0.0/16, fe80::/10, instance metadata): refused unless sandboxd runs with "
      .. "--egress-unblock link-local", 1, true), out)
    code, out = moonbox("--help")
    assert.are.equal(0, code)
    assert.truthy(out:find("moonbox policy network [--compose C]", 1, true), out)
    assert.truthy(out:find("Exit status: 0 when every check is allowed, 1 when one is denied", 1, true), out)
  end)

  it("explains each check with the rule and file:line that decides it; exit 1 when one is denied", function()
    local code, out, err = moonbox("policy network --policy network=net.lua --resolve pypi.org=151.101.0.223 "
      .. "--check https://pypi.org --check 10.0.0.5:22 --check http://169.254.169.254/latest/meta-data "
      .. "--check udp://8.8.8.8:53 --check 1.1.1.1:443 --check ssh://pypi.org", dir)
    assert.are.equal(1, code, err)
    assert.are.equal("", err)
    for _, line in ipairs({
      "network policy: defaults + network=net.lua (--policy network=net.lua)",
      "  allow_out[1]  pypi.org            net.lua:3",
      "  allow_out[2]  *.pythonhosted.org  net.lua:4",
      "  deny_out[1]   0.0.0.0/0           net.lua:7",
      "DNS in the sandbox: answers only the names allow_out names (a name it may never reach cannot be looked up)",
      "https://pypi.org  (tcp 443, decided by the name pypi.org)\n  DNS in the sandbox: answers pypi.org\n"
        .. "  pypi.org resolves to 1 address (--resolve)\n"
        .. '  151.101.0.223    allow  by name: allow_out[1] "pypi.org" (net.lua:3)\n  => allowed\n',
      '10.0.0.5:22  (tcp 22, decided by address)\n  10.0.0.5         allow  by allow_out[3] "10.0.0.5" (net.lua:5)\n  => allowed\n',
      "  169.254.169.254  deny   link-local address (where clouds serve instance metadata); refused unless sandboxd runs with --egress-unblock link-local\n  => denied\n",
      'udp://8.8.8.8:53  (udp 53, decided by address)\n  8.8.8.8          deny   by deny_out[1] "0.0.0.0/0" (net.lua:7)\n  => denied\n',
      "  1.1.1.1          deny   decided by the host name a connection names (TLS SNI, HTTP Host); a connection to the bare address names none\n",
      'ssh://pypi.org  (tcp 22, decided by address)\n  DNS in the sandbox: answers pypi.org\n  pypi.org resolves to 1 address (--resolve)\n'
        .. '  151.101.0.223    deny   by deny_out[1] "0.0.0.0/0" (net.lua:7)\n  => denied\n',
    }) do
      assert.truthy(out:find(line, 1, true), "missing:\n" .. line .. "\nin:\n" .. out)
    end
  end)

  it("exits 0 when every check is allowed, and decides a name it cannot resolve by name where a name decides", function()
    local code, out, err = moonbox("policy network --policy network=net.lua --check files.pythonhosted.org "
      .. "--check 10.0.0.5:5432 --resolve files.pythonhosted.org=151.101.1.63", dir)
    assert.are.same({ 0, "" }, { code, err }, out)
    code, out = moonbox("policy network --policy network=net.lua --check https://nosuch.pythonhosted.org.invalid", dir)
    -- *.pythonhosted.org does not match .invalid: nothing decides it by name, the address would
    assert.are.equal(1, code)
    assert.truthy(out:find("refuses nosuch.pythonhosted.org.invalid", 1, true), out)
    write(dir .. "/names.lua", 'allow_out = { "*.moonbox-spec.invalid" }\ndeny_out = { "0.0.0.0/0" }\n')
    code, out = moonbox("policy network --policy network=names.lua --check https://pkg.moonbox-spec.invalid", dir)
    assert.are.equal(0, code, out)
    assert.truthy(out:find("not resolved here (E2B_DNS: ", 1, true), out)
    assert.truthy(out:find('  by name: allow_out[1] "*.moonbox-spec.invalid" (names.lua:1), for each of its addresses '
      .. "the safe defaults allow\n  => allowed", 1, true), out)
    -- on another port a name is decided by its addresses: without them, exit 1 and say so
    write(dir .. "/open.lua", 'deny_out = { "198.51.100.0/24" }\n')
    code, out = moonbox("policy network --policy network=open.lua --check pkg.moonbox-spec.invalid:8080", dir)
    assert.are.equal(1, code)
    assert.truthy(out:find("=> cannot be decided here without its addresses (--resolve pkg.moonbox-spec.invalid=ADDR)", 1, true), out)
  end)

  it("resolves with the host's resolver and checks every address (localhost: loopback, never)", function()
    local code, out = moonbox("policy network --check http://localhost:8080", dir)
    assert.are.equal(1, code)
    assert.truthy(out:find("localhost resolves to %d+ address") and out:find("(the host's resolver)", 1, true), out)
    assert.truthy(out:find("not a destination a sandbox may reach (loopback", 1, true), out)
  end)

  it("--unblock explains as if sandboxd ran with --egress-unblock", function()
    local code, out = moonbox("policy network --unblock link-local --check http://169.254.169.254/", dir)
    assert.are.equal(0, code, out)
    assert.truthy(out:find("as if sandboxd ran with --egress-unblock link-local", 1, true), out)
    assert.truthy(out:find("169.254.169.254  allow  no denyOut entry holds the address", 1, true), out)
  end)

  it("--json prints the policy, each entry's file:line and each check's verdict", function()
    local code, out = moonbox("policy network --policy network=net.lua --resolve pypi.org=151.101.0.223 "
      .. "--check https://pypi.org --check 8.8.8.8:53 --json", dir)
    assert.are.equal(1, code)
    local j = cjson.decode(out)
    assert.are.same({ value = true, where = "default (" .. ROOT .. "/policies/network.lua:24)" }, j.internet)
    assert.are.same({ entry = "*.pythonhosted.org", where = "net.lua:4" }, j.allowOut[2])
    assert.are.same({ { entry = "0.0.0.0/0", where = "net.lua:7" } }, j.denyOut)
    assert.is_true(j.enforced)
    assert.is_false(j.allowed)
    assert.are.same({ "allow", "name", true }, { j.checks[1].verdict, j.checks[1].by, j.checks[1].dns })
    assert.are.same({ addr = "151.101.0.223", verdict = "allow-name", list = "allowOut", field = "allow_out", index = 1,
      entry = "pypi.org", where = "net.lua:3", why = "allowed by allowOut" }, j.checks[1].addresses[1])
    assert.are.same({ "deny", "address", "denyOut" }, { j.checks[2].verdict, j.checks[2].by, j.checks[2].addresses[1].list })
    code, out = moonbox("policy network --json", dir)
    assert.are.equal(0, code)
    assert.truthy(out:find('"allowOut":[]', 1, true) and out:find('"checks":[]', 1, true), out)   -- arrays, even empty
  end)

  it("--compose: the e2b plugin's allowInternetAccess, and the host providers' NOT enforced", function()
    write(dir .. "/sbx.lua", 'plugin "e2b" { allowInternetAccess = false }\n')
    local code, out, err = moonbox("policy network --compose sbx.lua --check 1.1.1.1:80", dir)
    assert.are.equal(1, code, err)
    assert.truthy(out:find('  internet      off                 sbx.lua:1 (plugin "e2b" allowInternetAccess)', 1, true), out)
    assert.truthy(out:find("allow_internet_access is false and no allowOut entry allows it", 1, true), out)
    write(dir .. "/host.lua", 'policies { network = "net.lua" }\nplugin "fs-local" {}\nplugin "subprocess-local" {}\n')
    code, out, err = moonbox("policy network --compose host.lua", dir)
    assert.are.equal(0, code, err)
    assert.truthy(out:find("NOT enforced: host.lua runs on the host providers (fs-local, subprocess-local); their programs "
      .. "reach whatever the host reaches", 1, true), out)
    assert.are.equal(1, count(err, "moonbox: warning: "), err)
    assert.truthy(err:find("host.lua: the network policy is NOT enforced", 1, true), err)
    code, out = moonbox("policy network --compose host.lua --json", dir)
    assert.is_false(cjson.decode(out).enforced)
  end)

  it("usage mistakes: one line naming the flag, exit 2, before anything is loaded", function()
    for _, c in ipairs({
      { "--check example.com:99999", "--check example.com:99999: the port must be in 1..65535" },
      { "--check foo://example.com", "unknown scheme foo:// (give the port: foo://HOST:PORT)" },
      { "--check udp://8.8.8.8", "udp:// needs a port" },
      { "--check 'a b'", "a b is neither an address nor a host name" },
      { "--check '*.example.com'", "is neither an address nor a host name" },
      { "--check [zz]:80", "zz is not an IPv6 address" },
      { "--resolve pypi.org=nope", "--resolve pypi.org=nope: nope is not an IP address" },
      { "--resolve pypi.org", "expected NAME=ADDR" },
      { "--unblock 8.8.8.0/24", "--unblock \"8.8.8.0/24\": only private, shared or link-local ranges" },
      { "example.com", "unexpected argument example.com" },
      { "--policy network=/nonexistent.lua --check 1.1.1.1:80 --check x:0", "--check x:0" },
    }) do
      local code, out, err = moonbox("policy network " .. c[1], dir)
      assert.are.equal(2, code, c[1] .. ": " .. err)
      assert.are.equal("", out)
      assert.truthy(err:match("^moonbox: policy network: [^\n]+; run 'moonbox policy network %-%-help' for usage\n$"), err)
      assert.truthy(err:find(c[2], 1, true), err)
    end
  end)

  it("a bad policy file is one line with file:line, exit 1", function()
    write(dir .. "/bad.lua", 'allow_out = {\n  "pypi.org",\n  "10.0.0.0/33",\n}\n')
    local code, out, err = moonbox("policy network --policy network=bad.lua", dir)
    assert.are.same({ 1, "" }, { code, out })
    assert.are.equal("moonbox: POLICY_INVALID: bad.lua:3: network policy: field allow_out[2]: expected an address, a CIDR, "
      .. [[a host name or a *.wildcard: "10.0.0.0/33": the prefix after '/' must be 0..32 (from --policy network=bad.lua)]] .. "\n", err)
    code, out = moonbox("policy check network=net.lua", dir)
    assert.are.equal(0, code)
    assert.truthy(out:find('allow_out: {} -> { "pypi.org", "*.pythonhosted.org", "10.0.0.5" }', 1, true), out)
  end)

  it("moonbox run on the host providers warns once that the policy is not enforced; dump-config shows it", function()
    write(dir .. "/host.lua", 'policies { network = "net.lua" }\nplugin "fs-local" {}\nplugin "subprocess-local" {}\n')
    write(dir .. "/s.lua", "io.write('ran')\nreturn 0\n")
    local code, out, err = moonbox("run host.lua s.lua", dir)
    assert.are.same({ 0, "ran" }, { code, out }, err)
    assert.are.equal(1, count(err, "moonbox: warning: "), err)
    assert.truthy(err:find("host.lua: the network policy is NOT enforced: this composition runs on the host providers "
      .. "(fs-local, subprocess-local), whose programs reach whatever the host reaches; only a sandbox (plugin \"e2b\") "
      .. "enforces it. It says: internet on; allow_out pypi.org, *.pythonhosted.org, 10.0.0.5; deny_out 0.0.0.0/0 [", 1, true), err)
    -- the default policy on the host: nothing to warn about
    write(dir .. "/plain.lua", 'plugin "fs-local" {}\n')
    code, out, err = moonbox("run plain.lua s.lua", dir)
    assert.are.same({ 0, "ran", "" }, { code, out, err })
    code, out = moonbox("dump-config --policy network=net.lua plain.lua", dir)
    assert.are.equal(0, code)
    assert.truthy(out:find('policy network\n     internet = true  [default (', 1, true), out)
    assert.truthy(out:find('     deny_out = { "0.0.0.0/0" }  [net.lua:7 (--policy network=net.lua)]', 1, true), out)
  end)
end)

describe("moonbox sandbox with network options (a fake control plane)", function()
  local srv, env
  setup(function()
    srv = H.start_server("fake_api.py")
    env = ("E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=e2b_%s"):format(srv.url, srv.url, ("0"):rep(40))
  end)
  teardown(function() H.stop_server(srv) end)
  local function requests()
    local res = H.run(function() return assert(require("moonbox").http.request{ url = srv.url .. "/_requests", max_bytes = 1 << 20 }) end)
    return cjson.decode(res.body)
  end
  local function last(method)
    local all = requests()
    for i = #all, 1, -1 do if all[i].method == method then return all[i] end end
  end

  it("creates with --allow-out, --deny-out and --no-internet, and info shows the network", function()
    local code, out, err = moonbox("sandbox create --allow-out pypi.org --allow-out '*.pythonhosted.org' "
      .. "--deny-out 0.0.0.0/0 --no-internet", nil, env)
    assert.are.equal(0, code, err)
    local id = out:match("^(%S+)\n$")
    local post = last("POST")
    assert.are.same({ allowOut = { "pypi.org", "*.pythonhosted.org" }, denyOut = { "0.0.0.0/0" } }, post.body.network)
    assert.is_false(post.body.allow_internet_access)
    code, out = moonbox("sandbox info " .. id, nil, env)
    assert.are.equal(0, code)
    assert.truthy(out:find("\nnetwork: internet off; allowOut pypi.org, *.pythonhosted.org; denyOut 0.0.0.0/0\n", 1, true), out)
    -- without network options, the request older servers know
    code, out = moonbox("sandbox create", nil, env)
    assert.are.equal(0, code)
    post = last("POST")
    assert.is_nil(post.body.network)
    assert.is_true(post.body.allow_internet_access)
    code, out = moonbox("sandbox info --json " .. out:match("^(%S+)"), nil, env)
    assert.truthy(out:find('"network":{"allowOut":[],"denyOut":[]}', 1, true), out)
  end)

  it("network ID replaces the rules (the PUT) and prints those in force", function()
    local _, out = moonbox("sandbox create --deny-out 0.0.0.0/0", nil, env)
    local id = out:match("^(%S+)")
    local code, err
    code, out, err = moonbox(("sandbox network %s --allow-out '*.pkg.dev' --allow-out 10.0.0.0/8"):format(id), nil, env)
    assert.are.same({ 0, id .. " network: internet on; allowOut *.pkg.dev, 10.0.0.0/8; no denyOut\n" }, { code, out }, err)
    assert.are.same({ allowOut = { "*.pkg.dev", "10.0.0.0/8" } }, last("PUT").body)
    code, out = moonbox(("sandbox network %s --no-internet --json"):format(id), nil, env)
    assert.are.equal(0, code)
    assert.are.same({ sandboxId = id, allowInternetAccess = false, network = { allowOut = {}, denyOut = {} } }, cjson.decode(out))
    assert.are.same({ allow_internet_access = false }, last("PUT").body)
    code, out = moonbox(("sandbox network %s --clear"):format(id), nil, env)
    assert.are.equal(0, code)
    assert.are.equal(id .. " network: internet on; no allowOut; no denyOut\n", out)
    assert.are.same({}, last("PUT").body)
  end)

  it("the server's refusals: one line, exit 1", function()
    local _, out = moonbox("sandbox create", nil, env)
    local id = out:match("^(%S+)")
    local code, err
    code, out, err = moonbox(("sandbox network %s --allow-out refuse.me"):format(id), nil, env)
    assert.are.same({ 1, "" }, { code, out })
    assert.are.equal(('moonbox: E2B_INVALID_ARGUMENT: PUT /sandboxes/%s/network: 400: allowOut[0]: "refuse.me": refused by the fake\n'):format(id), err)
    code, out, err = moonbox("sandbox network nosuch --allow-out x.io", nil, env)
    assert.are.same({ 1, "" }, { code, out })
    assert.truthy(err:find("^moonbox: E2B_NOT_FOUND: [^\n]*nosuch[^\n]*\n$"), err)
  end)

  it("usage mistakes name the flag, exit 2, and send nothing", function()
    local before = #requests()
    for _, c in ipairs({
      { "sandbox network x1 --allow-out 10.0.0.0/33", [[sandbox network: --allow-out "10.0.0.0/33": the prefix after '/' must be 0..32]] },
      { "sandbox network x1 --deny-out example.com", [[sandbox network: --deny-out "example.com": host names are not supported in denyOut]] },
      { "sandbox network x1", "sandbox network: give --allow-out, --deny-out, --no-internet or --clear" },
      { "sandbox network x1 --clear --no-internet", "sandbox network: --clear removes every rule: give it alone" },
      { "sandbox network --clear", "sandbox network: which sandbox?" },
      { "sandbox create --allow-out ''", [[sandbox create: --allow-out "": empty entry]] },
      { "sandbox create --deny-out 10.0.0.0/8 --deny-out '*.x.io'", [[sandbox create: --deny-out "*.x.io": host names are not supported]] },
    }) do
      local code, out, err = moonbox(c[1], nil, env)
      assert.are.equal(2, code, c[1] .. ": " .. err)
      assert.are.equal("", out)
      assert.truthy(err:match("^moonbox: sandbox %a+: [^\n]+; run 'moonbox sandbox %a+ %-%-help' for usage\n$"), err)
      assert.truthy(err:find("moonbox: " .. c[2], 1, true), err)
    end
    assert.are.equal(before, #requests())
  end)
end)
