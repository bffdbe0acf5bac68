local policies = require "moonbox.policies"
local env = policies.default("env")
local timeouts = policies.default("timeouts")
local lifecycle = policies.default("lifecycle")
local composition = policies.default("composition")

local function tmpdir()
  local d = os.tmpname(); os.remove(d); assert(os.execute("mkdir -p '" .. d .. "'")); return d
end
local function read(path) local f = assert(io.open(path)); local s = f:read("a"); f:close(); return s end
local function write(path, s) local f = assert(io.open(path, "w")); f:write(s); f:close() end

describe("the shipped env policy", function()
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

describe("the shipped timeouts policy", function()
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

describe("the shipped lifecycle policy", function()
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

describe("the shipped composition policy", function()
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


-- Policy files of a user's own: merged over the defaults, checked, explained, reloaded.
describe("policy files", function()
  local dirs = {}
  local function file(name, text)
    local dir = tmpdir()
    dirs[#dirs + 1] = dir
    write(dir .. "/" .. name, text)
    return dir .. "/" .. name
  end
  after_each(function() for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end dirs = {} end)
  local function load(concern, path) return policies.load{ { files = { [concern] = path }, via = "spec" } } end

  it("a partial file is merged over the defaults: every rule still works", function()
    -- once this replaced the whole module and the first spawn died calling a nil `build`
    local set = assert(load("env", file("strict.lua", 'return { drop_prefixes = {"AWS_"} }')))
    local e = set.env.build({ AWS_REGION = "eu", DSH_X = "1", MY_TOKEN = "t", PATH = "/bin" }, { EXTRA = "1" })
    assert.are.same({ DSH_X = "1", PATH = "/bin", EXTRA = "1" }, e)   -- a list replaces the default list
    assert.are.same({ "KEY", "PASSWORD", "SECRET", "TOKEN" }, set.env.sensitive_words)
    assert.are.same({ "EXTRA=1", "PATH=/bin" }, set.env.serialize({ PATH = "/bin", EXTRA = "1" }))
  end)

  it("can extend a default list through `defaults`, and may assign fields instead of returning them", function()
    local set = assert(load("env", file("ext.lua", 'drop_prefixes = { "AWS_", table.unpack(defaults.drop_prefixes) }\n')))
    assert.are.same({ "AWS_", "DSH_" }, set.env.drop_prefixes)
    assert.is_true(set.env.dropped("DSH_SESSION") and set.env.dropped("aws_region"))
  end)

  it("remembers where each value came from", function()
    local path = file("fast.lua", "-- faster\nreturn {\n  request_ms = 5000,\n}\n")
    local set = assert(load("timeouts", path))
    assert.are.equal(path .. ":3", set.origins.timeouts.request_ms.where)
    assert.are.equal("spec", set.origins.timeouts.request_ms.via)
    local d = set.origins.timeouts.create_ms
    assert.are.equal("default", d.kind)
    assert.truthy(d.where:match("policies/timeouts%.lua:%d+$"), d.where)
    local lines = table.concat(set:describe(), "\n")
    assert.truthy(lines:find("request_ms = 5000  [" .. path .. ":3 (spec)]", 1, true), lines)
    assert.truthy(lines:find("create_ms = 120000  [default (", 1, true), lines)
  end)

  it("merges a map key by key; false removes a key", function()
    local set = assert(load("composition", file("c.lua", 'return { plugins = { lsp = "my.lsp", fs = false } }')))
    assert.are.equal("my.lsp", set.composition.plugins.lsp)
    assert.are.equal("moonbox.e2b", set.composition.plugins.e2b)
    assert.is_nil(set.composition.plugins.fs)
  end)

  -- Every bad input: exit non-zero (the CLI), one line naming file:line, the field, what was expected.
  local bad = {
    { "a syntax error", "env", "return { drop_prefixes = {\"AWS_\"}\n", "%s:2: '}' expected (to close '{' at line 1) near <eof>" },
    { "a runtime error", "env", "local x\nreturn { drop_prefixes = x.y }\n", "%s:2: attempt to index a nil value (local 'x')" },
    { "an unknown field", "env", "return {\n  drop_prefixs = { \"A\" } }\n", "%s:2: env policy: unknown field drop_prefixs (expected one of keep_names, drop_names, drop_prefixes, sensitive_words, drop_patterns; the nearest is drop_prefixes)" },
    { "a wrong type", "timeouts", "return {\n  request_ms = \"5s\" }\n", "%s:2: timeouts policy: field request_ms: expected a positive number of milliseconds (at most 2147483647), got string \"5s\"" },
    { "a pattern that does not compile", "env", "return { drop_patterns = {\n  \"^AWS_\",\n  \"[a\" } }\n", "%s:3: env policy: field drop_patterns[2]: expected a Lua pattern: \"[a\" is not a Lua pattern: malformed pattern (missing ']')" },
    { "a pattern whose error comes after a failing match", "env", "return { drop_patterns = { \"x%\" } }", "%s:1: env policy: field drop_patterns[1]: expected a Lua pattern: \"x%\" is not a Lua pattern: malformed pattern (ends with '%')" },
    { "a name with =", "env", "drop_names = { \"OK\", \"A=B\" }\n", "%s:1: env policy: field drop_names[2]: expected an environment variable name (no '=', no NUL, no leading '-'): \"A=B\" contains '='" },
    { "a name with NUL", "env", "return { keep_names = { \"A\\0B\" } }\n", "%s:1: env policy: field keep_names[1]: expected an environment variable name (no '=', no NUL, no leading '-'): \"A\\0B\" contains NUL" },
    { "a function where a value belongs", "lifecycle", "return { renew = function() return false end }", "%s:1: lifecycle policy: field renew: expected true or false, got function" },
    { "an unknown teardown step", "lifecycle", "return { teardown = { \"block\", \"explode\" } }", "%s:1: lifecycle policy: field teardown[2]: expected a teardown step" },
    { "a fraction out of range", "lifecycle", "return { renew_below_fraction = 1 }", "%s:1: lifecycle policy: field renew_below_fraction: expected a fraction between 0 and 1 (exclusive), got integer 1" },
    { "a stream idle time shorter than the keepalive", "timeouts", "return { keepalive_interval_s = 200 }", "%s:1: timeouts policy: field keepalive_interval_s: stream_idle_ms (150000) must be longer than keepalive_interval_s × 1000 (200000 ms)" },
    { "a bad module name", "composition", "return { plugins = { x = \"a..b\" } }", "%s:1: composition policy: field plugins.x: expected a Lua module name: \"a..b\" is not a module name" },
    { "a file returning something else", "env", "return 42", "%s:1: a policy file returns a table of fields (or assigns them), got number" },
  }
  for _, c in ipairs(bad) do
    it("rejects " .. c[1] .. " in one line with file:line", function()
      local path = file("p.lua", c[3])
      local set, err = load(c[2], path)
      assert.is_nil(set)
      assert.are.equal("POLICY_INVALID", err.code)
      local want = c[4]:gsub("%%s", (path:gsub("%%", "%%%%")))
      assert.truthy(err.message:find(want, 1, true), err.message .. "\nwanted: " .. want)
      assert.is_nil(err.message:find("\n", 1, true), err.message)
    end)
  end

  it("names the field a cross-field rule blames at its own file:line", function()
    local path = file("t.lua", "return {\n  stream_idle_ms = 1000,\n}")
    local _, err = load("timeouts", path)
    assert.truthy(err.message:find(path .. ":2: timeouts policy: field stream_idle_ms: stream_idle_ms (1000) must be longer", 1, true), err.message)
  end)

  it("a missing file is one line naming who asked for it", function()
    local _, err = policies.load{ { files = { env = "/nonexistent/p.lua" }, via = "--policy env=/nonexistent/p.lua" } }
    assert.are.equal("POLICY_INVALID: --policy env=/nonexistent/p.lua: cannot read /nonexistent/p.lua: No such file or directory", tostring(err))
  end)

  it("a layer naming an unknown concern is a programming mistake and raises", function()
    assert.has_error(function() policies.load{ { files = { envv = "x.lua" } } } end)
  end)

  it("reload re-reads edited files into the tables consumers hold; an invalid edit is refused and the old values kept", function()
    local path = file("fast.lua", "return { request_ms = 5000 }")
    local set = assert(load("timeouts", path))
    local held = set.timeouts                   -- what a provider keeps from ctx.policies
    write(path, "return { request_ms = 7000 }")
    assert(set:reload())
    assert.are.equal(7000, held.request_ms)
    assert.is_function(held.check_grace)
    write(path, "return { request_ms = -7 }")
    local ok, err = set:reload()
    assert.is_nil(ok); assert.are.equal("POLICY_INVALID", err.code)
    assert.truthy(err.message:find(path .. ":1: timeouts policy: field request_ms", 1, true), err.message)
    assert.are.equal(7000, held.request_ms)
    -- and can point a concern at another file (every file is re-read: fast.lua must be valid again)
    write(path, "return { request_ms = 7000 }")
    local env2 = file("env2.lua", 'return { drop_names = { "HOME" } }')
    local held_env = set.env
    assert.is_false(held_env.dropped("HOME"))
    assert(set:reload{ env = env2 })
    assert.is_true(held_env.dropped("HOME"))
    assert.are.equal(7000, held.request_ms)
  end)

  describe("explain_env", function()
    local ambient = { PATH = "/bin", AWS_SECRET_ACCESS_KEY = "s", DSH_SESSION = "d", KEYBOARD = "us", HOME = "/home/user", LANG = "C" }

    it("says kept, dropped, set, overridden or deleted, and which rule decided where", function()
      local path = file("e.lua", 'return {\n  keep_names = { "KEYBOARD" },\n  drop_patterns = { "^LA" },\n}')
      local set = assert(load("env", path))
      local r = assert(policies.explain_env(set, ambient, { PATH = "/opt/bin", HOME = false, NEW = "1" },
        { explicit_where = function(name) return "--set " .. name end }))
      local by = {}
      for _, e in ipairs(r.entries) do by[e.name] = e end
      assert.are.equal("kept", by.PATH.was.verdict)
      assert.are.equal("overridden", by.PATH.verdict); assert.are.equal("--set PATH", by.PATH.where)
      assert.are.equal("dropped", by.AWS_SECRET_ACCESS_KEY.verdict)
      assert.are.equal("word KEY", by.AWS_SECRET_ACCESS_KEY.rule)    -- KEY is listed before SECRET
      assert.truthy(by.AWS_SECRET_ACCESS_KEY.where:match("policies/env%.lua:%d+$"))
      assert.are.equal("prefix DSH_", by.DSH_SESSION.rule)
      assert.are.equal("kept", by.KEYBOARD.verdict); assert.are.equal("name KEYBOARD", by.KEYBOARD.rule)
      assert.are.equal(path .. ":2", by.KEYBOARD.where)
      assert.are.equal("word KEY", by.KEYBOARD.over.rule)
      assert.are.equal("pattern ^LA", by.LANG.rule); assert.are.equal(path .. ":3", by.LANG.where)
      assert.are.equal("deleted", by.HOME.verdict); assert.are.equal("tombstone", by.HOME.rule)
      assert.are.equal("set", by.NEW.verdict)
      assert.are.same({ PATH = "/opt/bin", KEYBOARD = "us", NEW = "1" }, r.env)
      assert.are.same({ "AWS_SECRET_ACCESS_KEY", "DSH_SESSION", "HOME", "KEYBOARD", "LANG", "NEW", "PATH" },
        (function() local o = {} for i, e in ipairs(r.entries) do o[i] = e.name end return o end)())
    end)

    it("refuses a bad explicit entry with an error, not a raise", function()
      local r, err = policies.explain_env(nil, {}, { ["A=B"] = "x" })
      assert.is_nil(r); assert.are.equal("POLICY_INVALID", err.code)
      assert.truthy(err.message:find("name contains '='", 1, true))
    end)
  end)

  it("check lists what a file changes relative to the defaults, and infers its concern from its fields", function()
    local path = file("strict-env.lua", 'return {\n  drop_prefixes = { "DSH_", "AWS_" },\n  keep_names = {},\n}')
    local r = assert(policies.check(path))
    assert.are.equal("env", r.concern)
    assert.are.equal(2, r.set_fields); assert.are.equal(3, r.unchanged)
    assert.are.equal("drop_prefixes", r.changes[2].field)
    assert.are.same({ "DSH_" }, r.changes[2].from); assert.are.same({ "DSH_", "AWS_" }, r.changes[2].to)
    assert.are.equal(path .. ":2", r.changes[2].where)
    assert.is_true(r.changes[1].same)              -- keep_names = {} is the default value
    local _, err = policies.check(file("mixed.lua", "return { request_ms = 1, renew = false }"))
    assert.truthy(err.message:find("cannot tell which policy", 1, true), err.message)
  end)

  it("gives clocks with the file:line that set each", function()
    local path = file("t.lua", "return {\n  request_ms = 1234 }")
    local set = assert(load("timeouts", path))
    local by = {}
    for _, c in ipairs(policies.clocks(set, { timeoutMs = 60000, where = "c.lua:1" })) do by[c.name] = c end
    assert.are.equal(1234, by.request.ms); assert.are.equal(path .. ":2 (spec)", by.request.where)
    assert.are.equal(60000, by["sandbox lease"].ms); assert.truthy(by["sandbox lease"].where:find("c.lua:1", 1, true))
    assert.are.equal(30000, by["lease renewal"].ms)
    assert.is_nil(by["command deadline"].ms)
  end)

  it("an edited copy of a shipped file changes behaviour without a rebuild", function()
    local src = read(policies.default_file("lifecycle"))
    local edited, n = src:gsub("renew = true", "renew = false")
    assert.are.equal(1, n)
    local set = assert(load("lifecycle", file("lifecycle.lua", edited)))
    assert.is_number(policies.default("lifecycle").renewal_delay(300000))
    assert.is_nil(set.lifecycle.renewal_delay(300000))
  end)

  it("the shipped defaults load as plain modules too (moonbox.policies.<concern> when installed)", function()
    for _, c in ipairs(policies.CONCERNS) do
      local t = assert(loadfile(policies.default_file(c)))()
      assert.is_table(t)
      for _, f in ipairs(policies.kinds[c].fields) do assert.is_not_nil(t[f], c .. "." .. f) end
    end
  end)
end)
