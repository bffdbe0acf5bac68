-- bench/sandboxd_create_client.lua — create→ready through moonbox's own client (the C core's
-- libcurl transport, the Lua control-plane and envd clients), for bench/sandboxd_create.mjs:
-- each line on stdin is a sandboxd's URL; for it this runs POST /sandboxes, then /bin/true over
-- envd's process.Process/Start (the codec moonbox uses: binary protobuf) until its end, timed;
-- then DELETE (not timed), and prints one JSON line { id, total, post, cmd } (ms), or
-- { error } and goes on. Connections are kept alive per sandboxd, as a harness's are.
-- Run: moonbox bench/sandboxd_create_client.lua   (E2B_API_KEY in the environment)
local mb = require "moonbox"
local cjson = require "cjson"
local api_mod = require "moonbox.e2b.api"
local envd = require "moonbox.e2b.envd"

local KEY = assert(os.getenv("E2B_API_KEY"), "sandboxd_create_client: set E2B_API_KEY")
local apis = {}

local function once(url)
  apis[url] = apis[url] or api_mod.new{ url = url, api_key = KEY }
  local api = apis[url]
  local t0 = mb.now()
  local info, err = api:create{ template = "base", timeout_ms = 300000 }
  if not info then return { error = "create: " .. tostring(err) } end
  local t_created = mb.now()
  local e = envd.new{ url = url, sandbox_id = info.id, access_token = info.access_token, codec = "proto" }
  local s, serr = e:process_stream("process.Process/Start", { process = { cmd = "/bin/true" } },
    { stdout = "discard", stderr = "discard" })
  if not s then api:delete(info.id) return { error = "start: " .. tostring(serr) } end
  local code
  while code == nil do
    local facts, ferr = s:next_facts(30000)
    if not facts then
      s:close()
      api:delete(info.id)
      return { error = "stream: " .. tostring(e:stream_error("process.Process/Start", s, ferr or "ended without an end")) }
    end
    for _, f in ipairs(facts) do
      if f.kind == "end" then code = f.exit_code or 0 end
    end
  end
  local t1 = mb.now()
  s:close()
  local ok, derr = api:delete(info.id)
  if not ok then return { error = "delete: " .. tostring(derr) } end
  if code ~= 0 then return { error = "/bin/true exited " .. tostring(code) } end
  return { id = info.id, total = t1 - t0, post = t_created - t0, cmd = t1 - t_created }
end

-- stdin is read while no transfer is under way (between samples): blocking it stalls nothing.
for url in io.lines() do
  io.write(cjson.encode(once(url)), "\n")
  io.flush()
end
