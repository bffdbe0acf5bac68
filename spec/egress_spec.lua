-- core.egress: sandboxd's egress decision (sandboxd/egress_rules.c) bound into moonbox.core, so
-- that `moonbox policy network` explains with the code sandboxd enforces. Every verdict kind,
-- the safe defaults, the errors (nil, err naming the entry; raises for wrong types), and the
-- egress_* symbols kept out of libmoonbox.so's exports.
local egress = require("moonbox.core").egress

local function parse(t) return assert(egress.parse(t)) end

describe("core.egress", function()
  it("decides every verdict kind, naming the list, the 1-based index and the entry", function()
    local r = parse{ allowOut = { "8.8.8.8", "api.example.com", "*.pkg.dev" }, denyOut = { "0.0.0.0/0" } }
    assert.are.same({ verdict = "allow", list = "allowOut", index = 1, entry = "8.8.8.8", why = "allowed by allowOut" },
      egress.decide(r, { addr = "8.8.8.8", port = 53, proto = "udp" }))
    assert.are.same({ verdict = "need-name", why = "decided by the host name the connection names" },
      r:decide{ addr = "9.9.9.9", port = 443 })
    assert.are.same({ verdict = "allow-name", list = "allowOut", index = 2, entry = "api.example.com", why = "allowed by allowOut" },
      r:decide{ addr = "9.9.9.9", port = 443, name = "API.Example.com." })      -- compared as sandboxd does
    assert.are.same({ verdict = "allow-name", list = "allowOut", index = 3, entry = "*.pkg.dev", why = "allowed by allowOut" },
      r:decide{ addr = "9.9.9.9", port = 80, name = "a.b.pkg.dev" })
    assert.are.same({ verdict = "deny", list = "denyOut", index = 1, entry = "0.0.0.0/0", why = "denied by denyOut" },
      r:decide{ addr = "9.9.9.9", port = 22 })
    -- a name decides TCP 80 and 443 only; the apex of a wildcard is not matched
    assert.are.equal("deny", r:decide{ addr = "9.9.9.9", port = 8443, name = "api.example.com" }.verdict)
    assert.are.equal("deny", r:decide{ addr = "9.9.9.9", port = 443, proto = "udp", name = "api.example.com" }.verdict)
    assert.are.equal("deny", r:decide{ addr = "9.9.9.9", port = 443, name = "pkg.dev" }.verdict)
  end)

  it("applies sandboxd's safe defaults before any rule", function()
    local open = parse{}
    assert.are.same({ verdict = "allow", why = "no denyOut entry holds the address" }, open:decide{ addr = "198.51.100.7", port = 443 })
    for _, a in ipairs({ "169.254.169.254", "fe80::1", "::ffff:169.254.169.254" }) do
      local d = open:decide{ addr = a, port = 80 }
      assert.are.equal("deny", d.verdict, a)
      assert.truthy(d.why:find("link-local", 1, true), a)
      assert.is_nil(d.list)
    end
    for _, a in ipairs({ "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "fd12::3" }) do
      assert.truthy(open:decide{ addr = a, port = 443 }.why:find("private or shared", 1, true), a)
    end
    assert.truthy(open:decide{ addr = "127.0.0.1", port = 80 }.why:find("loopback", 1, true))
    assert.truthy(open:decide{ addr = "198.51.100.7", port = 80, host_local = true }.why:find("host's own", 1, true))
    -- 0.0.0.0/0 is no way into the LAN; an explicit CIDR inside a private range is
    assert.are.equal("deny", parse{ allowOut = { "0.0.0.0/0" } }:decide{ addr = "10.1.2.3", port = 22 }.verdict)
    local lan = parse{ allowOut = { "10.1.0.0/16" } }
    assert.are.same({ verdict = "allow", list = "allowOut", index = 1, entry = "10.1.0.0/16", why = "allowed by allowOut" },
      lan:decide{ addr = "10.1.2.3", port = 22 })
    assert.are.equal("deny", lan:decide{ addr = "10.2.0.1", port = 22 }.verdict)
    -- what sandboxd's --egress-unblock would allow
    assert.are.equal("allow", parse{ unblock = { "link-local" } }:decide{ addr = "169.254.169.254", port = 80 }.verdict)
    assert.are.equal("allow", parse{ unblock = { "private" } }:decide{ addr = "10.9.9.9", port = 80 }.verdict)
    assert.are.equal("deny", parse{ unblock = { "10.9.0.0/16" } }:decide{ addr = "10.8.1.1", port = 80 }.verdict)
    -- an address a name allowed by name resolved to: the safe defaults only
    local named = parse{ allowOut = { "example.com" }, denyOut = { "0.0.0.0/0" } }
    assert.are.equal("deny", named:decide{ addr = "10.0.0.1", port = 443, resolved = true }.verdict)
    assert.are.same({ verdict = "allow", why = "an address of the allowed name" },
      named:decide{ addr = "198.51.100.1", port = 443, resolved = true })
  end)

  it("without internet denies all but what allowOut names (as on E2B)", function()
    local r = parse{ internet = false, allowOut = { "198.51.100.0/24", "example.com" } }
    assert.are.equal("allow", r:decide{ addr = "198.51.100.7", port = 22 }.verdict)
    assert.are.equal("allow-name", r:decide{ addr = "1.2.3.4", port = 443, name = "example.com" }.verdict)
    local d = parse{ internet = false }:decide{ addr = "1.2.3.4", port = 443 }
    assert.are.same({ verdict = "deny", why = "allow_internet_access is false and no allowOut entry allows it" }, d)
  end)

  it("answers DNS for every name while the rules let public traffic through, else only allowed names", function()
    assert.is_true(parse{}:dns_allowed("anything.example"))
    assert.is_true(parse{ denyOut = { "9.0.0.0/8" }, allowOut = { "x.io" } }:dns_allowed("anything.example"))
    local closed = parse{ allowOut = { "api.example.com", "*.pkg.dev" }, denyOut = { "0.0.0.0/0" } }
    assert.is_true(egress.dns_allowed(closed, "API.example.com."))
    assert.is_true(closed:dns_allowed("x.pkg.dev"))
    assert.is_false(closed:dns_allowed("pkg.dev"))
    assert.is_false(closed:dns_allowed("exfil-1234.attacker.example"))
    assert.is_false(parse{ internet = false }:dns_allowed("example.com"))
  end)

  it("classifies addresses, IPv4-mapped ones as IPv4", function()
    assert.are.same({ "public", "private", "link-local", "special", "private", "special" },
      { egress.classify("1.1.1.1"), egress.classify("192.168.0.1"), egress.classify("169.254.169.254"),
        egress.classify("::1"), egress.classify("::ffff:10.0.0.1"), egress.classify("224.0.0.1") })
    local v, err = egress.classify("example.com")
    assert.is_nil(v)
    assert.are.same({ "E2B_INVALID_ARGUMENT", "example.com is not an IPv4 or IPv6 address" }, { err.code, err.message })
    assert.is_nil((egress.classify("1.1.1.1\0junk")))
  end)

  it("reads host names and *.wildcards as sandboxd does (the network policy's rule keys)", function()
    assert.are.same({ "api.github.com", false }, { egress.hostname("API.GitHub.com.") })
    assert.are.same({ "*.npmjs.org", true }, { egress.hostname("*.NPMjs.org") })
    local long = ("a"):rep(63) .. "." .. ("b"):rep(63) .. "." .. ("c"):rep(63) .. "." .. ("d"):rep(61)
    assert.are.equal(long, (egress.hostname(long)))                       -- 253 bytes
    for _, c in ipairs({
      { "10.0.0.1", '"10.0.0.1" is an address or a CIDR, not a host name' },
      { "10.0.0.0/8", "is an address or a CIDR" }, { "::1", "is an address or a CIDR" },
      { "*", 'a bare "*" is not a host name' }, { "a..b", "is not a host name or a *.wildcard" },
      { "*.*.x", "is not a host name" }, { "exa mple.com", "is not a host name" }, { "1.2.3.4.5", "is not a host name" },
      { "", "is not a host name" }, { long .. "d", "is not a host name" }, { "a.io\0x", "cannot contain NUL" },
    }) do
      local v, err = egress.hostname(c[1])
      assert.is_nil(v, c[1])
      assert.are.equal("E2B_INVALID_ARGUMENT", err.code)
      assert.truthy(err.message:find(c[2], 1, true), err.message)
    end
    assert.has_error(function() egress.hostname(nil) end)
  end)

  it("returns nil, err naming the entry as sandboxd does, with its list, 1-based index and entry", function()
    local r, err = egress.parse{ allowOut = { "1.1.1.1", " 10.0.0.0/33 " } }
    assert.is_nil(r)
    assert.are.equal("E2B_INVALID_ARGUMENT", err.code)
    assert.are.equal([[allowOut[1]: "10.0.0.0/33": the prefix after '/' must be 0..32]], err.message)
    assert.are.same({ "allowOut", 2, " 10.0.0.0/33 ", [["10.0.0.0/33": the prefix after '/' must be 0..32]] },
      { err.list, err.index, err.entry, err.reason })
    _, err = egress.parse{ denyOut = { "8.8.8.8", "example.com" } }
    assert.are.same({ "denyOut", 2 }, { err.list, err.index })
    assert.truthy(err.reason:find("host names are not supported in denyOut", 1, true), err.reason)
    local cases = {
      { { allowOut = { "" } }, "allowOut[0]: empty entry" },
      { { allowOut = { "*" } }, [[a bare "*" is not allowed]] },
      { { allowOut = { "foo/24" } }, "is not an IP address or CIDR" },
      { { allowOut = { "exa mple.com" } }, "is not an address, a CIDR, a host name" },
      { { allowOut = { "a\0b" } }, "allowOut[0]: the entry contains NUL" },
      { { unblock = { "8.8.8.0/24" } }, "unblock[0]: \"8.8.8.0/24\": only private, shared or link-local ranges" },
    }
    for _, c in ipairs(cases) do
      local x, e = egress.parse(c[1])
      assert.is_nil(x)
      assert.truthy(e.message:find(c[2], 1, true), e.message)
    end
    local many = {}
    for i = 1, 513 do many[i] = "1.1.1.1" end
    local _, e = egress.parse{ allowOut = many }
    assert.are.equal("allowOut: at most 512 entries (got 513)", e.message)
    assert.is_nil(e.list)
    many[513] = nil
    assert.is_not_nil(egress.parse{ allowOut = many })
  end)

  it("raises for programming mistakes", function()
    local r = parse{}
    local bad = {
      function() egress.parse("x") end,
      function() egress.parse{ internet = "yes" } end,
      function() egress.parse{ allowOut = "1.1.1.1" } end,
      function() egress.parse{ allowOut = { 1 } } end,
      function() egress.decide({}, { addr = "1.1.1.1" }) end,
      function() r:decide{ addr = "example.com", port = 80 } end,
      function() r:decide{ addr = "1.1.1.1", port = 70000 } end,
      function() r:decide{ addr = "1.1.1.1", port = 1.5 } end,
      function() r:decide{ addr = "1.1.1.1", proto = "icmp" } end,
      function() r:decide{ addr = "1.1.1.1", name = 7 } end,
      function() r:dns_allowed() end,
    }
    for i, f in ipairs(bad) do assert.is_false((pcall(f)), "case " .. i) end
  end)

  it("keeps the egress_* symbols out of libmoonbox.so's exports", function()
    local lib = (os.getenv("MB_BUILD_DIR") or "build") .. "/lib/libmoonbox.so"
    local p = assert(io.popen("nm -D --defined-only " .. lib .. " 2>&1"))
    local out = p:read("a")
    p:close()
    assert.truthy(out:find(" mb_runtime_", 1, true), out)        -- the listing worked
    assert.is_nil(out:find("egress", 1, true), out)
  end)
end)

describe("core.getaddrinfo", function()
  local mb = require "moonbox"
  local core = require "moonbox.core"
  local function resolve(name)
    return mb.run(function()
      local ev = mb.event()
      local req = assert(core.getaddrinfo(name, function() ev:set(true) end))
      assert(ev:wait(10000))
      return req:result()
    end)
  end

  it("resolves with the host's resolver, each address once", function()
    local l = assert(resolve("localhost"))
    local seen = {}
    for _, a in ipairs(l) do
      assert.is_nil(seen[a], a)
      seen[a] = true
      assert.are.equal("special", egress.classify(a))            -- loopback, v4 or v6
    end
    assert.is_true(#l >= 1)
    assert.are.same({ "192.0.2.7" }, assert(resolve("192.0.2.7")))
  end)

  it("an unknown name is E2B_DNS; result() before the callback raises", function()
    local l, err = resolve("nosuch.invalid")
    assert.is_nil(l)
    assert.are.equal("E2B_DNS", err.code)
    mb.run(function()
      local req = assert(core.getaddrinfo("localhost", function() end))
      assert.is_false((pcall(req.result, req)))
      req:cancel()
    end)
  end)

  it("a canceled request never calls back; a collected one is abandoned safely", function()
    local canceled, done = 0, mb.event()
    mb.run(function()
      for _ = 1, 20 do
        local req = core.getaddrinfo("localhost", function() canceled = canceled + 1 end)
        req:cancel()
        req:cancel()                                              -- idempotent
        core.getaddrinfo("localhost", function() end)             -- dropped at once
      end
      collectgarbage()
      collectgarbage()
      -- while a later request is resolved the canceled ones finish or are dropped in the
      -- threadpool (in any order); none of them may reach Lua
      local last = core.getaddrinfo("localhost", function() done:set(true) end)
      assert(done:wait(10000))
      last:cancel()
    end)
    assert.are.equal(0, canceled)
  end)
end)
