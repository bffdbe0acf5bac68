local compose = require "moonbox.compose"

-- Fake plugins record what happens to them in `log`.
local log = {}
local function fake(name, inject, opts)
  opts = opts or {}
  return {
    name = name, provides = name, inject = inject,
    schema = opts.schema or {},
    new = function(ctx, config)
      for _, dep in ipairs(inject) do assert(ctx[dep], name .. " loaded before " .. dep) end
      if opts.fail_new then return nil, { code = "FAKE", message = name .. " failed" } end
      log[#log + 1] = "new " .. name
      return { config = config, dispose = function()
        log[#log + 1] = "dispose " .. name
        if opts.fail_dispose then return nil, { code = "FAKE", message = name .. " dispose failed" } end
        return true
      end }
    end,
  }
end

local schema = {
  cwd = { type = "string", default = "/home/user/workspace",
          check = function(v) if v:sub(1, 1) ~= "/" then return "must be an absolute path" end end },
  timeoutMs = { type = "number", default = 300000 },
  apiKey = { type = "string", secret = true, default = function() return "e2b_from_env" end },
}
local mods = {
  owner = fake("owner", {}, { schema = schema }),
  files = fake("files", { "owner" }),
  procs = fake("procs", { "owner" }),
  tool = fake("tool", { "files", "procs" }),
  broken = fake("broken", { "owner" }, { fail_new = true }),
  sticky = fake("sticky", { "owner" }, { fail_dispose = true }),
  loopa = fake("loopa", { "loopb" }), loopb = fake("loopb", { "loopa" }),
}
local registry = {}
for name, m in pairs(mods) do
  package.preload["spec.fake." .. name] = function() return m end
  registry[name] = "spec.fake." .. name
end
local policy = { plugins = registry, rank = { owner = 1 } }
local function load(src) return compose.load("compose.lua", { source = src, policies = { composition = policy } }) end
local function names(comp) local out = {} for i, r in ipairs(comp.plugins) do out[i] = r.name end return out end

describe("moonbox.compose", function()
  before_each(function() for i = #log, 1, -1 do log[i] = nil end end)

  it("orders by what plugins inject, whatever the file order", function()
    local comp = assert(load('plugin "tool" {}\nplugin "procs" {}\nplugin "files" {}\nplugin "owner" {}\n'))
    local n = names(comp)
    assert.are.equal("owner", n[1]); assert.are.equal("tool", n[4])
  end)

  it("fills defaults and keeps given fields", function()
    local comp = assert(load('plugin "owner" { cwd = "/w" }'))
    assert.are.same({ cwd = "/w", timeoutMs = 300000, apiKey = "e2b_from_env" }, comp.plugins[1].config)
  end)

  it("accepts a plugin without a config table", function()
    local comp = assert(load('plugin "owner"\nplugin "files"'))
    assert.are.same({ "owner", "files" }, names(comp))
  end)

  local bad = {
    { "unknown plugin", 'plugin "owner" {}\nplugin "nope" {}', 'compose.lua:2: unknown plugin "nope"' },
    { "unknown field", 'plugin "owner" {\n  cwdd = "/x" }', 'compose.lua:1: plugin "owner": field cwdd: unknown field (expected ' },
    { "unknown field, with the nearest name", 'plugin "owner" { timeoutms = 5 }', 'field timeoutms: unknown field (expected apiKey, cwd, timeoutMs; the nearest is timeoutMs)' },
    { "wrong type", '\nplugin "owner" { timeoutMs = "5" }', 'compose.lua:2: plugin "owner": field timeoutMs: expected a number, got string' },
    { "failed check", 'plugin "owner" { cwd = "rel" }', 'compose.lua:1: plugin "owner": field cwd: must be an absolute path' },
    { "duplicate", 'plugin "owner" {}\n\nplugin "owner" {}', 'compose.lua:3: plugin "owner" mounted twice (first at compose.lua:1)' },
    { "missing dependency", 'plugin "files" {}', 'compose.lua:1: plugin "files" injects "owner"' },
    { "cycle", 'plugin "owner" {}\nplugin "loopa" {}\nplugin "loopb" {}', "dependency cycle: loopa -> loopb -> loopa" },
    { "config not a table", 'plugin "owner" "x"', 'compose.lua:1: plugin "owner": config must be a table' },
    { "empty composition", "-- nothing", "no plugin mounted" },
    { "syntax error", 'plugin "owner" {', "compose.lua:1:" },
    { "runtime error", 'plugin "owner" {}\nerror("boom")', "compose.lua:2: boom" },
  }
  for _, c in ipairs(bad) do
    it("rejects: " .. c[1], function()
      local comp, err = load(c[2])
      assert.is_nil(comp)
      assert.are.equal("COMPOSE_INVALID", err.code)
      assert.truthy(err.message:find(c[3], 1, true), err.message)
    end)
  end

  it("starts in order and disposes in reverse", function()
    local comp = assert(load('plugin "tool" {}\nplugin "files" {}\nplugin "procs" {}\nplugin "owner" {}'))
    local ctx, loaded = assert(compose.start(comp))
    assert.truthy(ctx.owner and ctx.files and ctx.procs and ctx.tool)
    assert(compose.stop(ctx, loaded))
    assert.are.same({ "new owner", "new files", "new procs", "new tool",
      "dispose tool", "dispose procs", "dispose files", "dispose owner" }, log)
    assert.is_nil(ctx.owner)
  end)

  it("rolls back what loaded when a plugin fails to start", function()
    local comp = assert(load('plugin "owner" {}\nplugin "files" {}\nplugin "broken" {}'))
    local ctx, err = compose.start(comp)
    assert.is_nil(ctx); assert.are.equal("broken failed", err.message)
    assert.are.same({ "new owner", "new files", "dispose files", "dispose owner" }, log)
  end)

  it("disposes everything even when one dispose fails, and reports it", function()
    local comp = assert(load('plugin "owner" {}\nplugin "sticky" {}\nplugin "files" {}'))
    local ctx, loaded = assert(compose.start(comp))
    local ok, err = compose.stop(ctx, loaded)
    assert.is_nil(ok); assert.are.equal("sticky dispose failed", err.message)
    assert.are.equal("dispose owner", log[#log])
  end)

  it("describes only mounted plugins and redacts secrets", function()
    local comp = assert(load('plugin "owner" { apiKey = "e2b_secret" }\nplugin "files" {}'))
    local text = compose.describe(comp)
    assert.truthy(text:find("\npolicy env\n", 1, true), text)
    text = text:sub(1, text:find("\npolicy env\n", 1, true))      -- the plugins, before the policy values
    assert.truthy(text:find("1. owner (spec.fake.owner) provides owner", 1, true), text)
    assert.truthy(text:find("2. files (spec.fake.files) provides files injects owner", 1, true), text)
    assert.truthy(text:find('cwd = "/home/user/workspace"', 1, true))
    assert.truthy(text:find("apiKey = <redacted>", 1, true))
    assert.is_nil(text:find("e2b_secret", 1, true))
    assert.is_nil(text:find("procs", 1, true))
    assert.truthy(text:find("dispose order: files, owner", 1, true))
  end)

  local function tree(files)               -- a temporary directory holding `files` (name → text)
    local dir = os.tmpname(); os.remove(dir); assert(os.execute("mkdir -p '" .. dir .. "/pol'"))
    for name, text in pairs(files) do
      local f = assert(io.open(dir .. "/" .. name, "w")); f:write(text); f:close()
    end
    return dir
  end

  it("reads a policies directory named by the composition, relative to the file, over the defaults", function()
    local dir = tree{ ["pol/timeouts.lua"] = "return { request_ms = 4242 }", ["c.lua"] = 'policies "pol"\nplugin "owner" {}\n' }
    local comp = assert(compose.load(dir .. "/c.lua", { policies = { composition = policy } }))
    assert.are.equal(4242, comp.policies.timeouts.request_ms)
    assert.are.equal(120000, comp.policies.timeouts.create_ms)         -- not in the file: the default
    assert.is_function(comp.policies.env.build)                        -- the other concerns: the shipped ones
    assert.are.same({ "DSH_" }, comp.policies.env.drop_prefixes)
    assert.are.equal(dir .. "/pol/timeouts.lua:1", comp.policies.origins.timeouts.request_ms.where)
    assert.are.equal(dir .. "/c.lua:1", comp.policies.origins.timeouts.request_ms.via)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("takes one file per concern, and the command line's files over the composition's", function()
    local dir = tree{ ["strict.lua"] = 'drop_prefixes = { "AWS_" }\n', ["fast.lua"] = "return { request_ms = 10, tool_ms = 20 }",
      ["cli.lua"] = "return { tool_ms = 30 }",
      ["c.lua"] = 'plugin "owner" {}\npolicies { env = "strict.lua", timeouts = "./fast.lua" }\n' }
    local comp = assert(compose.load(dir .. "/c.lua", { policies = { composition = policy },
      policy_files = { timeouts = dir .. "/cli.lua" } }))
    assert.are.same({ "AWS_" }, comp.policies.env.drop_prefixes)
    assert.is_true(comp.policies.env.dropped("AWS_REGION")); assert.is_false(comp.policies.env.dropped("DSH_X"))
    assert.are.equal(10, comp.policies.timeouts.request_ms)
    assert.are.equal(30, comp.policies.timeouts.tool_ms)
    assert.are.equal("--policy timeouts=" .. dir .. "/cli.lua", comp.policies.origins.timeouts.tool_ms.via)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  local bad_policies = {
    { "a missing policy file", 'plugin "owner" {}\npolicies { env = "nope.lua" }', "c.lua:2: cannot read %s/nope.lua: No such file or directory" },
    { "a missing policy directory", 'plugin "owner" {}\n\npolicies "nodir"', 'c.lua:3: policies "nodir": not a directory: %s/nodir' },
    { "an unknown concern", 'policies { envv = "x.lua" }\nplugin "owner" {}', 'c.lua:1: policies: unknown concern "envv" (expected env, lifecycle, timeouts, composition or network)' },
    { "a policy file that does not validate", 'plugin "owner" {}\npolicies { timeouts = "bad.lua" }',
      '%s/bad.lua:2: timeouts policy: field tool_ms: expected a positive number of milliseconds (at most 2147483647), got integer -1 (from %s/c.lua:2)' },
  }
  for _, c in ipairs(bad_policies) do
    it("rejects " .. c[1] .. " before anything starts, naming file:line", function()
      local dir = tree{ ["c.lua"] = c[2], ["bad.lua"] = "return {\n  tool_ms = -1 }" }
      local comp, err = compose.load(dir .. "/c.lua", { policies = { composition = policy } })
      assert.is_nil(comp)
      local want = c[3]:gsub("%%s", dir)
      assert.truthy(err.message:find(want, 1, true), err.message .. "\nwanted: " .. want)
      assert.is_nil(err.message:find("\n", 1, true))
      os.execute("rm -rf '" .. dir .. "'")
    end)
  end

  it("gives the e2b plugin its defaults from the composition's lifecycle policy", function()
    local dir = tree{ ["life.lua"] = 'return { default_cwd = "/srv/work", default_timeout_ms = 12000 }',
      ["c.lua"] = 'plugin "e2b" {}\npolicies { lifecycle = "life.lua" }' }
    local comp = assert(compose.load(dir .. "/c.lua"))
    assert.are.equal("/srv/work", comp.plugins[1].config.cwd)
    assert.are.equal(12000, comp.plugins[1].config.timeoutMs)
    local plain = assert(compose.load("c.lua", { source = 'plugin "e2b" {}' }))
    assert.are.equal("/home/user/workspace", plain.plugins[1].config.cwd)
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
