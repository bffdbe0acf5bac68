local env = require "policies.env"
local timeouts = require "policies.timeouts"
local lifecycle = require "policies.lifecycle"
local composition = require "policies.composition"

local function tmpdir()
  local d = os.tmpname(); os.remove(d); assert(os.execute("mkdir -p '" .. d .. "'")); return d
end
local function read(path) local f = assert(io.open(path)); local s = f:read("a"); f:close(); return s end
local function write(path, s) local f = assert(io.open(path, "w")); f:write(s); f:close() end

describe("policies/env.lua", function()
  local ambient = {
    PATH = "/usr/bin", HOME = "/home/user", LANG = "C.UTF-8",
    DSH_SESSION = "s", dsh_lower = "x", Dsh_Mixed = "y", XDSH_NOT_PREFIX = "kept",
    E2B_API_KEY = "e2b_00", api_key = "k", MY_PASSWORD = "p", password_file = "p",
    AWS_SECRET_ACCESS_KEY = "s", SANDBOX_API_TOKEN = "t", GH_Token = "t",
    KEYBOARD = "us", MONKEY = "m",   -- substring match: these are dropped too, on purpose
  }
  local scrubbed = env.scrub(ambient)
  local cases = {
    { "PATH", true }, { "HOME", true }, { "LANG", true }, { "XDSH_NOT_PREFIX", true },
    { "DSH_SESSION", false }, { "dsh_lower", false }, { "Dsh_Mixed", false },
    { "E2B_API_KEY", false }, { "api_key", false }, { "MY_PASSWORD", false }, { "password_file", false },
    { "AWS_SECRET_ACCESS_KEY", false }, { "SANDBOX_API_TOKEN", false }, { "GH_Token", false },
    { "KEYBOARD", false }, { "MONKEY", false },
  }
  for _, c in ipairs(cases) do
    it((c[2] and "keeps " or "drops ") .. c[1], function()
      assert.are.equal(c[2] and ambient[c[1]] or nil, scrubbed[c[1]])
    end)
  end

  it("does not modify the ambient table", function()
    assert.are.equal("e2b_00", ambient.E2B_API_KEY)
  end)

  it("lets explicit entries override and opt in to dropped names", function()
    local e = env.build(ambient, { PATH = "/opt/bin", EXPLICIT_TOKEN = "t", DSH_SESSION_ID = "1" })
    assert.are.equal("/opt/bin", e.PATH)
    assert.are.equal("t", e.EXPLICIT_TOKEN)
    assert.are.equal("1", e.DSH_SESSION_ID)
  end)

  it("deletes with a false tombstone", function()
    local e = env.build(ambient, { HOME = false, NOT_THERE = false })
    assert.is_nil(e.HOME); assert.is_nil(e.NOT_THERE); assert.are.equal("/usr/bin", e.PATH)
  end)

  local bad = {
    { "empty name", { [""] = "v" }, "empty name" },
    { "= in name", { ["A=B"] = "v" }, '"A=B": name contains \'=\'' },
    { "NUL in name", { ["A\0B"] = "v" }, "name contains NUL" },
    -- once injected a command (`env -i -Sx=...` ran /bin/touch): a leading '-' is refused
    { "a leading '-' in a name", { ["-Sx"] = "y /bin/touch /tmp/INJECTED" }, "\"-Sx\": name begins with '-'" },
    { "NUL in value", { GOOD_NAME = "a\0b" }, '"GOOD_NAME": value contains NUL' },
    { "non-string value", { N = 1 }, '"N": value must be a string or false' },
    { "true is not a tombstone", { T = true }, '"T": value must be a string or false' },
    { "non-string name", { [1] = "v" }, "name must be a string" },
  }
  for _, c in ipairs(bad) do
    it("rejects " .. c[1] .. " naming the entry", function()
      local ok, err = pcall(env.build, ambient, c[2])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[3], 1, true), tostring(err))
    end)
  end

  it("serializes deterministically", function()
    assert.are.same({ "A=1", "B=", "C=x=y" }, env.serialize({ C = "x=y", A = "1", B = "" }))
  end)
end)

describe("policies/timeouts.lua", function()
  local grace = {
    { 1, true }, { 3000, true }, { 2147483647, true }, { 0, false }, { -1, false },
    { 2147483648, false }, { math.huge, false }, { 0 / 0, false }, { "10", false },
  }
  for _, c in ipairs(grace) do
    it(("check_grace(%s) %s"):format(tostring(c[1]), c[2] and "accepts" or "rejects"), function()
      assert.are.equal(c[2], (pcall(timeouts.check_grace, c[1])))
    end)
  end
  it("clamps to the maximum and uses the default", function()
    assert.are.equal(10, timeouts.clamp(50, 5, 10))
    assert.are.equal(5, timeouts.clamp(nil, 5, 10))
    assert.is_false((pcall(timeouts.clamp, 0, 5, 10)))
  end)
  it("treats a stream as dead only after several missed keepalives", function()
    assert.is_true(timeouts.stream_idle_ms > timeouts.keepalive_interval_s * 1000)
  end)
end)

describe("policies/lifecycle.lua", function()
  it("renews when less than the fraction remains", function()
    assert.is_false(lifecycle.should_renew(300000, 200000))
    assert.is_true(lifecycle.should_renew(300000, 100000))
    assert.are.equal(150000, lifecycle.renewal_delay(300000))
  end)
  it("never schedules renewals faster than the minimum interval", function()
    assert.are.equal(lifecycle.min_renew_interval_ms, lifecycle.renewal_delay(10))
  end)
  it("tears down in a fixed order: block first, delete before stopping sandboxd", function()
    local pos = {}
    for i, step in ipairs(lifecycle.teardown) do pos[step] = i end
    assert.are.equal(1, pos.block)
    assert.is_true(pos.await_setup < pos.delete and pos.delete < pos.stop_sandboxd)
  end)
  it("keeps the runtime root outside the default cwd", function()
    local root = lifecycle.runtime_root:format("x")
    assert.are_not.equal(lifecycle.default_cwd, root:sub(1, #lifecycle.default_cwd))
  end)
end)

describe("policies/composition.lua", function()
  local function names(list) local out = {} for i, p in ipairs(list) do out[i] = p.name end return out end
  local function P(name, inject, index) return { name = name, provides = name, inject = inject or {}, index = index } end

  local orders = {
    { "file order fs, subprocess, e2b", { P("fs", { "e2b" }, 1), P("subprocess", { "e2b" }, 2), P("e2b", {}, 3) } },
    { "file order subprocess, e2b, fs", { P("subprocess", { "e2b" }, 1), P("e2b", {}, 2), P("fs", { "e2b" }, 3) } },
    { "owner alone", { P("e2b", {}, 1) } },
  }
  for _, c in ipairs(orders) do
    it("puts the owner first: " .. c[1], function()
      local out = assert(composition.order(c[2]))
      assert.are.equal("e2b", out[1].name)
      local seen = {}
      for _, p in ipairs(out) do
        for _, dep in ipairs(p.inject) do assert.is_true(seen[dep], p.name .. " before " .. dep) end
        seen[p.name] = true
      end
    end)
  end
  it("orders an unranked plugin after what it injects", function()
    local out = assert(composition.order({ P("lsp", { "fs", "subprocess" }, 1), P("fs", { "e2b" }, 2),
      P("subprocess", { "e2b" }, 3), P("e2b", {}, 4) }))
    assert.are.same({ "e2b", "fs", "subprocess", "lsp" }, names(out))
  end)
  it("names the cycle", function()
    local out, err = composition.order({ P("e2b", {}, 1), P("a", { "b" }, 2), P("b", { "c" }, 3), P("c", { "a" }, 4), P("d", { "a" }, 5) })
    assert.is_nil(out)
    assert.are.equal("dependency cycle: a -> b -> c -> a", err)   -- d only depends on the cycle
  end)
  it("rejects a missing dependency", function()
    local out, err = composition.order({ P("fs", { "e2b" }, 1) })
    assert.is_nil(out); assert.truthy(err:find('"e2b"', 1, true))
  end)
  it("disposes in reverse", function()
    assert.are.same({ "c", "b", "a" }, names(composition.dispose_order({ P("a"), P("b"), P("c") })))
  end)
end)

describe("edited policies change behaviour", function()
  local compose = require "moonbox.compose"
  local root = package.searchpath("policies.env", package.path):gsub("/env%.lua$", "")

  it("an edited env.lua drops what the shipped one keeps", function()
    local dir = tmpdir()
    local src = read(root .. "/env.lua")
    local edited, n = src:gsub('M%.drop_prefixes = { "DSH_" }', 'M.drop_prefixes = { "DSH_", "AWS_" }')
    assert.are.equal(1, n)
    write(dir .. "/env.lua", edited)
    local shipped = compose.policies(nil).env
    local mine = compose.policies(dir).env
    local ambient = { AWS_REGION = "eu", PATH = "/bin" }
    assert.are.equal("eu", shipped.build(ambient).AWS_REGION)
    assert.is_nil(mine.build(ambient).AWS_REGION)
    assert.are.equal("/bin", mine.build(ambient).PATH)
    -- the other policies still come from the installed copies
    assert.are.equal(require("policies.timeouts"), compose.policies(dir).timeouts)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("an edited lifecycle.lua turns lease renewal off", function()
    local dir = tmpdir()
    local edited, n = read(root .. "/lifecycle.lua"):gsub("M%.renew = true", "M.renew = false")
    assert.are.equal(1, n)
    write(dir .. "/lifecycle.lua", edited)
    assert.is_number(compose.policies(nil).lifecycle.renewal_delay(300000))
    assert.is_nil(compose.policies(dir).lifecycle.renewal_delay(300000))
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("an edited composition.lua reorders a composition", function()
    local dir = tmpdir()
    local edited, n = read(root .. "/composition.lua"):gsub("M%.rank = { e2b = 1, fs = 2, subprocess = 3,",
      "M.rank = { e2b = 1, subprocess = 2, fs = 3,")
    assert.are.equal(1, n)
    write(dir .. "/composition.lua", edited)
    local list = function() return { { name = "fs", provides = "fs", inject = { "e2b" }, index = 1 },
      { name = "subprocess", provides = "subprocess", inject = { "e2b" }, index = 2 },
      { name = "e2b", provides = "e2b", inject = {}, index = 3 } } end
    local a = assert(compose.policies(nil).composition.order(list()))
    local b = assert(compose.policies(dir).composition.order(list()))
    assert.are.equal("fs", a[2].name); assert.are.equal("subprocess", b[2].name)
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
