-- The soak: one Lua state, many mixed operations from several workers, as a harness that lives
-- for hours would do them. Run by `make soak` (10,000 operations) and by the test command (a
-- 1,000-operation version):
--
--   moonbox run examples/demo/compose.lua tests/soak/soak.lua [OPS] [WORKERS]
--
-- Operations: writeText / readText / editText / readBytes / listDir / stat; spawns in every
-- stdio mode (collect, pipe, inherit, batch and pipe stdin); terminals; task:cancel() in the
-- middle of a write and of a spawn; wait timeouts that expire; streams closed mid-read; and,
-- every few batches, a second sandbox deleted under a running command and a running write.
-- A watchdog fails the run on a stall (no operation finished for STALL_MS), printing every
-- blocked task's traceback and every open process stream. After each batch (and a full GC)
-- the live libuv handles, transfers in flight, Lua registry references and live tasks must be
-- back at their baseline (taken after the second batch, once pools have warmed up); RSS must
-- stay flat over the second half (its slope is reported).
-- Prints one line "soak: N passed, M failed" last.
local mb = require "moonbox"
local core = require "moonbox.core"
local compose = require "moonbox.compose"

local _, ops_arg, workers_arg = ...
local OPS = tonumber(ops_arg or os.getenv("SOAK_OPS") or "10000")
local WORKERS = tonumber(workers_arg or "8")
local BATCH = 200
local STALL_MS = tonumber(os.getenv("SOAK_STALL_MS") or "60000")
local fs, sp = ctx.fs, ctx.subprocess
local sb = assert(ctx.e2b:sandbox())
local dir = sb.cwd .. "/soak-" .. os.time()
local failures, done_ops, last_progress = {}, 0, mb.now()

local function fail(what, err) failures[#failures + 1] = what .. ": " .. tostring(err) end
local function must(what, v, err) if v == nil or v == false then fail(what, err) end return v end

local function spawn(argv, stdio, extra)
  local spec = { argv = argv, cwd = sb.cwd, graceMs = 200, stdio = stdio }
  for k, v in pairs(extra or {}) do spec[k] = v end
  return sp:spawn(spec)
end

local function drain(r, timeout)
  local n = 0
  while true do
    local c, err = r:read(timeout or 30000)
    if not c then return n, err end
    n = n + #c
  end
end

-- One operation of each kind; `i` varies sizes and names. Each returns nothing, records failures.
local kinds = {
  function(i)                                   -- write, read back, stat
    local t = must("resolve", fs:resolve(("%s/f%d.txt"):format(dir, i % 50)))
    if not t then return end
    local body = ("line " .. i .. "\n"):rep(1 + i % 200)
    if must("writeText", fs:writeText(t, body)) then
      local got, err = fs:readText(t)
      if got ~= body then fail("readText", err or "content differs") end
      must("stat", fs:stat(t))
    end
  end,
  function(i)                                   -- edit (CRLF kept), readBytes
    local t = must("resolve", fs:resolve(("%s/e%d.txt"):format(dir, i % 20)))
    if not t then return end
    must("writeText", fs:writeText(t, "alpha\r\nbeta " .. i .. "\r\n"))
    local r, err = fs:editText(t, { oldString = "beta " .. i, newString = "gamma" })
    if not r then fail("editText", err) return end
    local b = fs:readBytes(t, 1024)
    if b ~= "alpha\r\ngamma\r\n" then fail("readBytes", b) end
  end,
  function()                                    -- listDir
    local t = must("resolve", fs:resolve(dir))
    if t then must("listDir", fs:listDir(t)) end
  end,
  function(i)                                   -- collect mode with a spill
    local h, err = spawn({ "/bin/sh", "-c", "seq 1 " .. (i % 3000) .. "; echo e >&2" },
      { stdin = "ignore", stdout = { maxBytes = 512, spill = { maxBytes = 1 << 20 } }, stderr = { maxBytes = 64 } })
    if not h then return fail("spawn collect", err) end
    local o, werr = h:wait(30000)
    if not (o and o.exitCode == 0) then fail("collect wait", werr) end
  end,
  function(i)                                   -- pipe mode, read to the end
    local h, err = spawn({ "/bin/sh", "-c", "head -c " .. (1000 + i * 37 % 200000) .. " /dev/zero" },
      { stdin = "ignore", stdout = "pipe", stderr = "pipe" })
    if not h then return fail("spawn pipe", err) end
    local n = drain(h.stdout)
    drain(h.stderr)
    if n ~= 1000 + i * 37 % 200000 then fail("pipe bytes", n) end
    must("pipe wait", h:wait(30000))
  end,
  function()                                    -- inherit mode (prints nothing), batch stdin
    local h, err = spawn({ "true" }, { stdin = "ignore", stdout = "inherit", stderr = "inherit" })
    if not h then return fail("spawn inherit", err) end
    must("inherit wait", h:wait(30000))
    local c, cerr = spawn({ "cat" }, { stdin = { data = "batch" }, stdout = { maxBytes = 16 }, stderr = { maxBytes = 16 } })
    if not c then return fail("spawn data stdin", cerr) end
    must("data wait", c:wait(30000))
    if c.collected.stdout:readFrom(0).text ~= "batch" then fail("data stdin", c.collected.stdout:readFrom(0).text) end
  end,
  function()                                    -- pipe stdin
    local h, err = spawn({ "cat" }, { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = 16 } })
    if not h then return fail("spawn pipe stdin", err) end
    must("stdin write", h.stdin:write("to cat\n"))
    must("stdin close", h.stdin:close())
    local n = drain(h.stdout)
    if n ~= 7 then fail("pipe stdin echo", n) end
    must("pipe stdin wait", h:wait(30000))
  end,
  function()                                    -- a terminal
    local t, err = sp:spawnTerminal{ argv = { "/bin/sh" }, env = { PS1 = "$ " }, graceMs = 300 }
    if not t then return fail("spawnTerminal", err) end
    must("terminal write", t:write("echo soak; exit 3\n"))
    drain(t, 10000)
    local o, werr = t:wait(10000)
    if not (o and o.exitCode == 3) then fail("terminal outcome", werr or (o and (o.exitCode or o.signal))) end
  end,
  function(i)                                   -- cancel in the middle of a write
    local t = must("resolve", fs:resolve(("%s/c%d.txt"):format(dir, i % 10)))
    if not t then return end
    local res = {}
    local w = mb.spawn(function() res.r, res.err = fs:writeText(t, ("c"):rep(256 * 1024)) end)
    mb.sleep(i % 7)
    w:cancel()
    local ok = w:join(30000)
    if not ok then return fail("canceled write join", "did not finish") end
    if not res.r and res.err and res.err.code ~= "FS_ABORTED" then fail("canceled write", res.err) end
  end,
  function(i)                                   -- cancel in the middle of a spawn; a wait that times out
    local ev = mb.event()
    local task = mb.spawn(function() return spawn({ "sleep", "30" }, { stdin = "ignore", stdout = "pipe",
      stderr = { maxBytes = 16 } }, { cancel = ev }) end)
    mb.sleep(i % 5)
    ev:set()
    local ok, h = task:join(30000)
    if ok and h then
      local o, err = h:wait(1)                       -- may time out: the tree is still going down
      if not o and err.code ~= "MB_TIMEOUT" then fail("canceled spawn", err) end
      must("canceled spawn ends", h:wait(30000))
      if h:waitForExit(30000) ~= true then fail("canceled spawn tree", "survived") end
    end
  end,
  function(i)                                   -- a stream closed in the middle of a read
    local t = must("resolve", fs:resolve(("%s/s%d.txt"):format(dir, i % 5)))
    if not t then return end
    must("writeText", fs:writeText(t, ("s"):rep(512 * 1024)))
    local it, err = fs:streamText(t)
    if not it then return fail("streamText", err) end
    must("stream chunk", it.next())
    it.close()
  end,
}

-- A second sandbox, deleted under a running command and a running write.
local function sandbox_deleted()
  local comp = assert(compose.load("soak-doomed.lua", { source = 'plugin "e2b" {}\nplugin "fs" {}\nplugin "subprocess" {}\n' }))
  local c2, loaded = compose.start(comp)
  if not c2 then return fail("doomed sandbox", loaded) end
  local sb2, err = c2.e2b:sandbox()
  if not sb2 then compose.stop(c2, loaded) return fail("doomed sandbox", err) end
  local h = c2.subprocess:spawn{ argv = { "sleep", "60" }, cwd = sb2.cwd, graceMs = 100,
    stdio = { stdin = "ignore", stdout = { maxBytes = 16 }, stderr = { maxBytes = 16 } } }
  local t = c2.fs:resolve("big")
  local res = {}
  local w = mb.spawn(function() res.r, res.err = c2.fs:writeText(t, ("d"):rep(64 * 1024 * 1024)) end)
  mb.sleep(20)
  c2.e2b.api:delete(sb2.id)
  local _, herr = h:wait(60000)
  if not (herr and herr.code == "E2B_SANDBOX_GONE") then fail("command under a deleted sandbox", herr) end
  w:join(60000)
  if res.r == nil and not (res.err and res.err.code == "E2B_SANDBOX_GONE") then
    fail("write under a deleted sandbox", res.err)
  end
  compose.stop(c2, loaded)
end

-- What must return to its baseline after every batch (once the last operations' own
-- timers, e.g. terminate graces, ran out: the counts are taken when they stopped changing).
local function sample()
  for _ = 1, 3 do collectgarbage("collect") end
  local refs = 0
  for k, v in pairs(debug.getregistry()) do
    if math.type(k) == "integer" and type(v) ~= "number" then refs = refs + 1 end
  end
  local live = 0
  for _, t in ipairs(mb.tasks()) do if t ~= mb.current() then live = live + 1 end end
  local tracked = 0
  for _ in pairs(sp.live) do tracked = tracked + 1 end
  for _ in pairs(sp.terminals) do tracked = tracked + 1 end
  local li = core.loop_info()
  -- stopped timers are a pool (bounded by the peak number of concurrent timeouts), not a leak
  return { handles = li.handles - li.idle_timers, transfers = mb.http.stats().active, refs = refs, tasks = live,
    streams = #mb.pstream.open_streams(), tracked = tracked }
end
local function same(a, b)
  for k, v in pairs(a) do if b[k] ~= v then return false end end
  return true
end
local function counts()
  local c, stable = sample(), 0
  local t0 = mb.now()
  while stable < 3 and mb.now() - t0 < 10000 do
    mb.sleep(100)
    local n = sample()
    if same(n, c) then stable = stable + 1 else stable, c = 0, n end
  end
  return c
end

local function show(c)
  return ("uv handles %d, transfers %d, registry refs %d, tasks %d, open streams %d, tracked processes %d"):format(
    c.handles, c.transfers, c.refs, c.tasks, c.streams, c.tracked)
end

local stalled = false
local watchdog = mb.spawn(function()
  while true do
    mb.sleep(1000)
    if mb.now() - last_progress > STALL_MS then
      stalled = true
      io.stderr:write(("soak: STALL — no operation finished for %d ms\n"):format(STALL_MS))
      for _, t in ipairs(mb.tasks()) do
        local w = t:where()
        if w then io.stderr:write("  task ", tostring(t), ":\n", w, "\n") end
      end
      for _, s in ipairs(mb.pstream.open_streams()) do
        io.stderr:write(("  open stream %s (%.0f ms, closed: %s)\n"):format(s.url, mb.now() - s.started, tostring(s.closed)))
      end
      io.stderr:write("  ", show(counts()), "\n")
      os.exit(1)
    end
  end
end)

assert(fs:writeText(assert(fs:resolve(dir .. "/.keep")), ""))
local batches = math.max(1, OPS // BATCH)
local rss, baseline = {}, nil
local t_start = mb.now()
for b = 1, batches do
  local next_i = (b - 1) * BATCH
  local last = b * BATCH
  local ws = {}
  for w = 1, WORKERS do
    ws[w] = mb.spawn(function()
      while next_i < last do
        next_i = next_i + 1
        local i = next_i
        kinds[(i - 1) % #kinds + 1](i)
        done_ops = done_ops + 1
        last_progress = mb.now()
      end
    end)
  end
  for _, w in ipairs(ws) do
    local ok, err = w:join(STALL_MS * 10)
    if not ok then fail("worker", err) end
  end
  if b % 10 == 5 then sandbox_deleted() end
  local c = counts()
  rss[b] = core.rss_bytes()
  -- the baseline is taken after two batches: pools (timers, easy handles) have warmed up
  if b <= 2 then baseline = c
  else
    for k, v in pairs(baseline) do
      if c[k] ~= v then fail(("batch %d: %s"):format(b, k), ("%d, baseline %d"):format(c[k], v)) end
    end
  end
  io.write(("soak: batch %d/%d, %d ops, %.1f s, RSS %.1f MiB, %s\n"):format(b, batches, done_ops,
    (mb.now() - t_start) / 1000, rss[b] / 1048576, show(c)))
  if c.tracked > 0 then
    for h in pairs(sp.live) do
      io.write(("soak:   tracked %s pid %s wrapper %s empty %s settled %s transport %s spawn %s\n"):format(
        h.spec.argv[#h.spec.argv], tostring(h.pid), tostring(h.wrapper_pid), tostring(h.tree_empty),
        tostring(h.settled), tostring(h.transport_error), tostring(h.spawn_error)))
    end
  end
  if b > 2 and c.streams > baseline.streams then
    for h in pairs({}) do
      io.write(("soak:   tracked %s pid %s wrapper %s empty %s settled %s transport %s spawn %s\n"):format(
        h.spec.argv[#h.spec.argv], tostring(h.pid), tostring(h.wrapper_pid), tostring(h.tree_empty),
        tostring(h.settled), tostring(h.transport_error), tostring(h.spawn_error)))
    end
    for _, st in ipairs(mb.pstream.open_streams()) do
      io.write(("soak:   open stream %s (%s, %.0f ms, closed: %s)\n"):format(tostring(st.tag), st.url,
        mb.now() - st.started, tostring(st.closed)))
    end
  end
  io.flush()
end
watchdog:cancel()

-- RSS over the second half: least-squares slope in KiB per batch.
local h0 = batches // 2 + 1
local n, sx, sy, sxx, sxy = 0, 0, 0, 0, 0
for b = h0, batches do
  n = n + 1; sx = sx + b; sy = sy + rss[b]; sxx = sxx + b * b; sxy = sxy + b * rss[b]
end
local slope = n > 1 and (n * sxy - sx * sy) / (n * sxx - sx * sx) / 1024 or 0
local growth = (rss[batches] - rss[h0]) / 1048576
io.write(("soak: %d operations in %.1f s, %d stalls, RSS slope over the second half %.1f KiB/batch (%.2f MiB)\n"):format(
  done_ops, (mb.now() - t_start) / 1000, stalled and 1 or 0, slope, growth))
if batches >= 4 and growth > 8 then fail("RSS", ("grew %.2f MiB over the second half"):format(growth)) end
for _, f in ipairs(failures) do io.write("soak: FAIL ", f, "\n") end
io.write(("soak: %d passed, %d failed\n"):format(#failures == 0 and 1 or 0, #failures == 0 and 0 or 1))
io.flush()
if #failures > 0 then return 1 end
return 0
