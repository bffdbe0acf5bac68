-- The consumer operations of bench/consumers.sh, timed inside one world (the composition given
-- to `moonbox run` picks host or sandbox): a bash run of `true`, a terminal send of `true`, an
-- LSP hover (clangd). Each op N times after one warm-up; prints one RESULT line with the median
-- and p90 latency (ms) and the requests each op cost at the transport (0 on the host).
local mb = require "moonbox"
local cjson = require "cjson"
local N = tonumber((select(2, ...))) or 30   -- the script gets (ctx, args...)

local function median(t, q)
  table.sort(t)
  return t[math.max(1, math.ceil(#t * (q or 0.5)))]
end

local function measure(name, op, out)
  op()
  local times, reqs = {}, {}
  for i = 1, N do
    local r0, t0 = mb.http.stats().requests, mb.now()
    op()
    times[i], reqs[i] = mb.now() - t0, mb.http.stats().requests - r0
  end
  out[name] = { median_ms = median(times), p90_ms = median(times, 0.9), requests = median(reqs),
    max_requests = math.max(table.unpack(reqs)) }
end

local base = assert(ctx.fs:resolve("."))
local ws = assert(ctx.fs:resolve(("moonbox-bench.%d"):format(mb.core.getpid()), { cwd = base.targetKey }))
local dir = ctx.fs:processPath(ws)
assert(ctx.bash:run{ command = "mkdir -p -- \"$W\"", cwd = base.targetKey, env = { W = dir } })
local src = "static int square(int x) { return x * x; }\nint main(void) { return square(3); }\n"
assert(ctx.fs:writeText(assert(ctx.fs:resolve("main.c", { cwd = dir })), src))

local out = {}
measure("bash_run_true", function() assert(ctx.bash:run{ command = "true", cwd = dir }) end, out)
local t = assert(ctx.terminal:open{ cwd = dir })
measure("terminal_send_true", function() assert(t:send("true")) end, out)
assert(t:close())
local c = assert(ctx.lsp:start{ root = dir })
assert(c:open("main.c"))
assert(c:diagnostics("main.c"))
local col = src:match("\nint main%(void%) { return ()square") - src:find("\n", 1, true) - 1
measure("lsp_hover", function() assert(c:hover("main.c", { line = 1, character = col })) end, out)
assert(c:shutdown())
assert(ctx.bash:run{ command = "rm -rf -- \"$W\"", cwd = base.targetKey, env = { W = dir } })
print("RESULT " .. cjson.encode(out))
