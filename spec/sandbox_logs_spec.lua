-- sandboxd's logs endpoints as E2B defines them: GET /sandboxes/{id}/logs (v1: `logs` lines and
-- `logEntries`, ?start= &limit=) and GET /v2/sandboxes/{id}/logs (?cursor= &limit= &direction=),
-- their refusals, and client:logs.
local cjson = require "cjson"

describe("sandbox logs #sandboxd", function()
  local mb, client, id
  local key, base = os.getenv("E2B_API_KEY"), os.getenv("E2B_API_URL")
  local function get(path)
    local res = assert(mb.http.request{ url = base .. path, headers = { ["X-API-KEY"] = key }, max_bytes = 1 << 20, timeout_ms = 10000 })
    return res.status, cjson.decode(res.body)
  end
  setup(function()
    mb = require "moonbox"
    client = mb.run(function() return assert(require("moonbox.e2b").client{}) end)
  end)
  before_each(function()
    id = mb.run(function() return assert(client.api:create{ timeout_ms = 60000 }).id end)
  end)
  after_each(function() mb.run(function() client:kill(id) end) end)

  it("serves E2B's v1 and v2 shapes, oldest first or newest first, from a cursor, at most a limit", function()
    mb.run(function()
      assert(client:setTimeout(id, 50000))
      assert(client:setTimeout(id, 40000))
      local st, v1 = get("/sandboxes/" .. id .. "/logs")
      assert.are.equal(200, st)
      assert.are.equal(3, #v1.logs)
      assert.are.equal(3, #v1.logEntries)
      assert.are.equal("sandbox created template=base", v1.logs[1].line)
      assert.are.equal("timeout set seconds=40", v1.logs[3].line)
      assert.are.same({ "info", "timeout set", { seconds = "50" } },
        { v1.logEntries[2].level, v1.logEntries[2].message, v1.logEntries[2].fields })
      assert.truthy(v1.logs[1].timestamp:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$"))
      local _, back = get("/v2/sandboxes/" .. id .. "/logs?direction=backward&limit=2")
      assert.are.same({ "timeout set", "timeout set" }, { back.logs[1].message, back.logs[2].message })
      assert.are.same({ "40", "50" }, { back.logs[1].fields.seconds, back.logs[2].fields.seconds })
      -- a cursor past the last entry: nothing forward; client:logs parses the times
      local all = assert(client:logs(id))
      assert.are.equal(3, #all)
      assert.is_true(all[1].timestampMs <= all[3].timestampMs)
      assert.are.same({}, assert(client:logs(id, { cursor = all[3].timestampMs + 1 })))
      assert.are.equal(1, #assert(client:logs(id, { cursor = all[3].timestampMs + 1, direction = "backward", limit = 1 })))
      local _, v1start = get("/sandboxes/" .. id .. "/logs?start=" .. (all[3].timestampMs + 1))
      assert.are.same({ 0, 0 }, { #v1start.logs, #v1start.logEntries })
    end)
  end)

  it("refuses unknown parameters, bad values and unknown sandboxes, naming them", function()
    mb.run(function()
      for _, c in ipairs({
        { "/v2/sandboxes/" .. id .. "/logs?direction=up", 400, "query parameter 'direction' must be 'forward' or 'backward' (got 'up')" },
        { "/v2/sandboxes/" .. id .. "/logs?start=1", 400, "query parameter 'start' is not supported here (cursor, limit, direction are)" },
        { "/sandboxes/" .. id .. "/logs?cursor=1", 400, "query parameter 'cursor' is not supported here (start, limit are)" },
        { "/sandboxes/" .. id .. "/logs?limit=0x10", 400, "query parameter 'limit' must be a whole number from 0 to 2000 (got '0x10')" },
        { "/sandboxes/" .. id .. "/logs?limit=2001", 400, "query parameter 'limit' must be a whole number from 0 to 2000 (got '2001')" },
        { "/v2/sandboxes/nosuch/logs", 404, "sandbox 'nosuch' not found" },
      }) do
        local st, body = get(c[1])
        assert.are.same({ c[2], c[3] }, { st, body.message }, c[1])
      end
      assert.has_error(function() client:logs(id, { direction = "sideways" }) end, 'e2b: logs: direction must be "forward" or "backward"')
      assert.has_error(function() client:logs(id, { limt = 3 }) end, "e2b: logs: unknown field limt (expected cursor, limit, direction; the nearest is limit)")
      assert.has_error(function() client:logs(id, { cursor = 1.5 }) end, "e2b: logs: cursor must be Unix milliseconds (a whole number)")
      local l, err = client:logs("nosuchsandbox")
      assert.is_nil(l)
      assert.are.equal("E2B_NOT_FOUND", err.code)
    end)
  end)
end)
