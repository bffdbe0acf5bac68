-- The sandbox API's cost (issue 11): requests per ctx.e2b call, counted at the transport
-- (goal: 1 each, as the SDK), on the sandboxd of bench/api.sh. Prints one RESULT line.
local mb = require "moonbox"
local cjson = require "cjson"
local e2b = ctx.e2b
assert(e2b:sandbox())
local rows = {}
local function count(name, fn)
  local before = mb.http.stats().requests
  local r, err = fn()
  local n = mb.http.stats().requests - before
  local status = r ~= nil and "ok" or (err and err.status == 501 and "not served by sandboxd (501)") or tostring(err)
  rows[#rows + 1] = { op = name, requests = n, status = status }
  print(("%-22s %d request(s)  %s"):format(name, n, status))
end
count("info", function() return e2b:info() end)
count("setTimeout", function() return e2b:setTimeout(600000) end)
count("list", function() return e2b:list{ metadata = { bench = "api" } } end)
count("pause", function() return e2b:pause() end)
count("resume", function() return e2b:resume() end)
count("metrics", function() return e2b:metrics() end)
count("host", function() return e2b:host(8080) end)
count("snapshot", function() return e2b:snapshot() end)
local other = assert(e2b.api:create{ timeout_ms = 60000 })
count("kill", function() return e2b:kill(other.id) end)
local o2 = assert(e2b.api:create{ timeout_ms = 60000 })
count("connect", function() return e2b:connect(o2.id) end)
e2b.api:delete(o2.id)
print("RESULT " .. cjson.encode(rows))
