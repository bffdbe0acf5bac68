local compose = require "moonbox.compose"
local composition = require "policies.composition"

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
local policy = setmetatable({ plugins = registry, rank = { owner = 1 } }, { __index = composition })
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
    { "unknown field", 'plugin "owner" {\n  cwdd = "/x" }', 'compose.lua:1: plugin "owner": field cwdd: unknown field' },
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
    assert.truthy(text:find("1. owner (spec.fake.owner) provides owner", 1, true), text)
    assert.truthy(text:find("2. files (spec.fake.files) provides files injects owner", 1, true), text)
    assert.truthy(text:find('cwd = "/home/user/workspace"', 1, true))
    assert.truthy(text:find("apiKey = <redacted>", 1, true))
    assert.is_nil(text:find("e2b_secret", 1, true))
    assert.is_nil(text:find("procs", 1, true))
    assert.truthy(text:find("dispose order: files, owner", 1, true))
  end)

  it("reads a policies directory named by the composition, relative to the file", function()
    local dir = os.tmpname(); os.remove(dir); assert(os.execute("mkdir -p '" .. dir .. "/pol'"))
    local f = assert(io.open(dir .. "/pol/timeouts.lua", "w")); f:write("return { marker = 42 }"); f:close()
    f = assert(io.open(dir .. "/c.lua", "w")); f:write('policies "pol"\nplugin "owner" {}\n'); f:close()
    local comp = assert(compose.load(dir .. "/c.lua", { policies = { composition = policy } }))
    assert.are.equal(42, comp.policies.timeouts.marker)
    assert.are.equal(require("policies.env"), comp.policies.env)
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
