-- Every option table of the sandbox API client and mb.proc.spawn is strict: an unknown field is
-- a raise naming it (and the nearest valid one) at the caller's line, before any request. (The
-- calls below are not tail calls, so that the caller's line is the spec's.)
local client_mod = require "moonbox.e2b.client"
local mb = require "moonbox"

describe("strict options", function()
  local c = assert(client_mod.new{ apiKey = "e2b_" .. ("0"):rep(40), getenv = function() return nil end })
  local ID = "abc123"
  local cases = {
    { "list", function() local r = c:list{ metdata = {} } return r end, "e2b: list: unknown field metdata", "metadata" },
    { "listAll", function() local r = c:listAll{ stat = "running" } return r end, "e2b: listAll: unknown field stat", "state" },
    { "create", function() local r = c:create{ templat = "base" } return r end, "e2b: create: unknown field templat", "template" },
    { "connect", function() local r = c:connect(ID, { timeout = 1000 }) return r end, "e2b: connect: unknown field timeout", "timeoutMs" },
    { "resume", function() local r = c:resume(ID, { timeoutms = 1000 }) return r end, "e2b: resume: unknown field timeoutms", "timeoutMs" },
    { "metrics", function() local r = c:metrics(ID, { star = 1 }) return r end, "e2b: metrics: unknown field star", "start" },
    { "snapshot", function() local r = c:snapshot(ID, { nam = "x" }) return r end, "e2b: snapshot: unknown field nam", "name" },
    { "snapshots", function() local r = c:snapshots{ sandboxID = ID } return r end, "e2b: snapshots: unknown field sandboxID", "sandboxId" },
    { "listSecrets", function() local r = c:listSecrets{ limt = 2 } return r end, "e2b: listSecrets: unknown field limt", "limit" },
    { "listAllSecrets", function() local r = c:listAllSecrets{ nextToke = "x" } return r end, "e2b: listAllSecrets: unknown field nextToke", "nextToken" },
    { "logs", function() local r = c:logs(ID, { limt = 2 }) return r end, "e2b: logs: unknown field limt", "limit" },
    { "buildTemplate", function() local r = c:buildTemplate({}, { nmae = "x" }) return r end, "e2b: buildTemplate: unknown field nmae", "name" },
    { "proc.spawn", function() local r = mb.proc.spawn{ argv = { "true" }, cwdd = "/" } return r end, "proc.spawn: unknown field cwdd", "cwd" },
  }
  for _, k in ipairs(cases) do
    it(k[1] .. " names an unknown field and the nearest valid one, at the caller's line", function()
      local ok, err = pcall(k[2])
      assert.is_false(ok)
      err = tostring(err)
      assert.truthy(err:find("strict_options_spec.lua:%d+: " .. k[3]:gsub("%p", "%%%0")), err)
      assert.truthy(err:find("the nearest is " .. k[4], 1, true), err)
    end)
  end
  it("snapshots refuses a limit that is not a positive integer", function()
    assert.has_error(function() c:snapshots{ limit = 0 } end, "e2b: snapshots: limit must be a positive integer")
  end)
end)
