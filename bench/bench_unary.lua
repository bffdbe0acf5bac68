-- Unary request latency through the Lua API (mb.http.request), one task, sequential requests.
-- usage: moonbox bench/bench_unary.lua URL N  → prints "lua_us_per_req <float>"
-- (moonbox runs this file as the main task.)
local mb = require "moonbox"
local url, n = ...
n = tonumber(n) or 2000
for _ = 1, 50 do assert(mb.http.request{ url = url, max_bytes = 1024, timeout_ms = 5000 }) end
local t0 = mb.now()
for _ = 1, n do
  local res = assert(mb.http.request{ url = url, max_bytes = 1024, timeout_ms = 5000 })
  if res.status ~= 200 then error("status " .. res.status) end
end
local us = (mb.now() - t0) * 1000 / n
io.write(string.format("lua_us_per_req %.2f\n", us))
