-- Run by spec/edge/edge_spec.lua (moonbox run spec/edge/compose.lua spec/edge/run.lua): a command,
-- a file, and a server inside the sandbox reached through ctx.e2b:host(port), all over the edge.
-- Prints what it saw, one "name: value" line each, for the spec to check.
local mb = require "moonbox"
local sp, fs = ctx.subprocess, ctx.fs
local sb = assert(ctx.e2b:sandbox())
print("sandbox: " .. sb.id)
local function run(argv)
  local h = assert(sp:spawn{ argv = argv, cwd = sb.cwd, graceMs = 100,
    stdio = { stdin = "ignore", stdout = { maxBytes = 1000 }, stderr = { maxBytes = 1000 } } })
  assert(h:wait(30000))
  return h.collected.stdout:readFrom(0).text
end
io.write("command: ", run{ "/bin/sh", "-c", "echo edge-$((6*7))" })
local t = assert(fs:resolve("index.txt"))
assert(fs:writeText(t, "served to moonbox\n", { kind = "createIfAbsent" }))
print("file: " .. fs:readBytes(t, 100):gsub("\n$", ""))
local server = assert(sp:spawn{ argv = { "python3", "-m", "http.server", "8000", "-d", sb.cwd }, cwd = sb.cwd, graceMs = 100,
  stdio = { stdin = "ignore", stdout = { maxBytes = 10000 }, stderr = { maxBytes = 10000 } } })
local url = assert(ctx.e2b:host(8000))
print("host: " .. url)
local tr = ctx.e2b.endpoints.transport
local function get(u)
  return mb.http.request{ url = u, max_bytes = 10000, timeout_ms = 10000, ca_file = tr.ca_file, connect_to = tr.connect_to }
end
local r, err
for _ = 1, 100 do                                   -- the server is starting
  r, err = get(url .. "/index.txt")
  if r and r.status == 200 then break end
  mb.sleep(100)
end
print("get: " .. (r and (r.status .. " " .. r.body:gsub("\n$", "")) or tostring(err)))
local c = assert(get(assert(ctx.e2b:host(8001)) .. "/"))
print("closed: " .. c.status .. " " .. c.body)
assert(server:terminate())
