-- bench/edge.sh's moonbox side, run once per round by `moonbox run bench/providers_compose.lua
-- bench/edge_ops.lua N`, with either the plain configuration (E2B_API_URL / E2B_SANDBOX_URL:
-- http://) or the edge one (E2B_DOMAIN + MOONBOX_CA_FILE + MOONBOX_CONNECT_TO: https:// per
-- sandbox host). After a warm-up (the connections are open then), N timed runs of each:
--   spawn→exit of `true` through ctx.subprocess
--   a 1 KiB write and read back through ctx.fs (writeText, readBytes)
-- Prints one line `RESULT {json}`: medians (ms), requests per operation, and the connections
-- this process opened during the timed runs (mb.http.stats().connects: 0 means every request
-- reused a warm connection).
local mb = require "moonbox"
local cjson = require "cjson"
local args = { ... }
local ctx_, n = args[1], math.tointeger(tonumber(args[2])) or 30
local fs, sp = ctx_.fs, ctx_.subprocess
local sb = assert(ctx_.e2b:sandbox())

local function median(a)
  local s = {}
  for i, v in ipairs(a) do s[i] = v end
  table.sort(s)
  local k = #s
  if k % 2 == 1 then return s[(k + 1) // 2] end
  return (s[k // 2] + s[k // 2 + 1]) / 2
end
local function check(v, err, what)
  if v == nil then error(("%s failed: %s"):format(what, tostring(err)), 0) end
  return v
end

local function spawn_true()
  local h, err = sp:spawn{ argv = { "true" }, cwd = sb.cwd, graceMs = 1000,
    stdio = { stdin = "ignore", stdout = { maxBytes = 65536 }, stderr = { maxBytes = 65536 } } }
  check(h, err, "spawn true")
  local o, werr = h:wait(60000)
  check(o, werr, "wait true")
  if o.exitCode ~= 0 then error("true exited with " .. tostring(o.signal or o.exitCode), 0) end
end

local target = check(fs:resolve("edge-bench.txt"))
local data = ("0123456789abcdef"):rep(64)            -- 1 KiB
local function write_read()
  check(fs:writeText(target, data), nil, "writeText")
  local back = check(fs:readBytes(target, 4096), nil, "readBytes")
  if back ~= data then error("read back other bytes", 0) end
end

local function measure(fn)
  for _ = 1, 3 do fn() end                          -- warm-up: connections open, caches full
  local t = {}
  local s0 = mb.http.stats()
  for i = 1, n do
    local t0 = mb.now()
    fn()
    t[i] = mb.now() - t0
  end
  local s1 = mb.http.stats()
  return { median_ms = median(t), requests = (s1.requests - s0.requests) / n, connects = s1.connects - s0.connects }
end

local spawn = measure(spawn_true)
local wr = measure(write_read)
io.write("RESULT ", cjson.encode({ spawn = spawn, write_read = wr }), "\n")
