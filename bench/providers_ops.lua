-- bench/providers_ops.lua — the moonbox side of bench/providers.sh (issue 4, "Benchmarks").
-- Run as `moonbox run bench/providers_compose.lua bench/providers_ops.lua MODE [ARG]` against
-- the sandboxd that E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY point at. Modes:
--   counts          requests per operation, counted at the transport (mb.http.stats() deltas)
--   latency N       spawn→exit of `true` through ctx.subprocess (full semantics), N runs
--   throughput B    B bytes of stdout through the wrapper, pipe mode and collect mode
--   echo N          N round trips of 1 KiB through `cat` (a stdin write, then reading it back)
--   rss B           peak host RSS (VmHWM) while readBytes(B-byte file, 1 MiB) → FS_TOO_LARGE
--   calls           Lua resumes and Lua→C calls per command as its output grows (1 KiB, 1 MiB,
--                   256 MiB) in collect and inherit modes (inherit: run with stdout on /dev/null)
--   write-rss B     peak host RSS of one writeText of B bytes (the goal: ≤ 1.5 × B)
-- Prints a human line or two, then one line `RESULT {json}`. Any failed operation raises
-- (moonbox run then exits non-zero).
local mb = require "moonbox"
local cjson = require "cjson"
local args = { ... }
local ctx_ = args[1]
local mode, arg = args[2], tonumber(args[3])
local fs, sp = ctx_.fs, ctx_.subprocess
local sb = assert(ctx_.e2b:sandbox())

local function reqs() return mb.http.stats().requests end
-- this process's user+sys CPU seconds (/proc/self/stat utime, stime at USER_HZ 100)
local function cpu_s()
  local f = assert(io.open("/proc/self/stat"))
  local st = f:read("a") f:close()
  local fields = {}
  for x in st:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = x end
  return (tonumber(fields[12]) + tonumber(fields[13])) / 100
end
local function result(t) io.write("RESULT ", cjson.encode(t), "\n") io.flush() end
local function median(a)
  local s = {}
  for i, v in ipairs(a) do s[i] = v end
  table.sort(s)
  local n = #s
  if n % 2 == 1 then return s[(n + 1) // 2] end
  return (s[n // 2] + s[n // 2 + 1]) / 2
end
local function check(v, err, what)
  if v == nil then error(("%s failed: %s"):format(what, tostring(err)), 0) end
  return v
end

local function spawn_true(stdout)
  local h, err = sp:spawn{ argv = { "true" }, cwd = sb.cwd, graceMs = 1000,
    stdio = { stdin = "ignore", stdout = stdout or { maxBytes = 65536 }, stderr = { maxBytes = 65536 } } }
  check(h, err, "spawn true")
  local o, werr = h:wait(60000)
  check(o, werr, "wait true")
  if o.exitCode ~= 0 then error("true exited with " .. tostring(o.signal or o.exitCode), 0) end
  return h
end

if mode == "counts" then
  local rows = {}
  -- js: the JavaScript family's count for the same operation (seams-and-anchor.md §7)
  local function count(name, js, fn)
    local before = reqs()
    local r = fn()
    local n = reqs() - before
    rows[#rows + 1] = { op = name, requests = n, js = js }
    return r
  end
  count("spawn `true` (collect), through exit", "9-10 +1", function() return spawn_true() end)
  local target = count("fs.resolve", "1", function()
    return check(fs:resolve("bench-counts.txt"))
  end)
  local w = count("fs.writeText createIfAbsent (absent)", "8", function()
    return check(fs:writeText(target, "one\r\ntwo\r\n", { kind = "createIfAbsent" }))
  end)
  w = count("fs.writeText replaceIfVersion (ok)", "8", function()
    return check(fs:writeText(target, "one\r\ntwo\r\nthree\r\n", { kind = "replaceIfVersion", version = w.version }))
  end)
  count("fs.writeText replaceIfVersion (stale)", "1", function()
    local r, err = fs:writeText(target, "x", { kind = "replaceIfVersion", version = "e2b:0:0:0:0:0" })
    if r or not err or err.code ~= "FS_STALE_VERSION" then error("stale guard not rejected: " .. tostring(err), 0) end
  end)
  count("fs.writeText unconditional (overwrite)", "8", function()
    return check(fs:writeText(target, "one\r\ntwo\r\nthree\r\n"))
  end)
  count("fs.readText", "2", function() return check(fs:readText(target)) end)
  count("fs.stat", "1", function() return check(fs:stat(target)) end)
  count("fs.editText", "8", function()
    return check(fs:editText(target, { oldString = "two", newString = "2 ($& literal)" }))
  end)
  count("subprocess.resolveExecutable", "1", function() return check(sp:resolveExecutable("sh")) end)
  local term = count("spawnTerminal", "8", function()
    return check(sp:spawnTerminal{ argv = { "/bin/sh", "-i" }, cwd = sb.cwd, env = { PS1 = "$ ", TERM = "dumb" },
      rows = 24, cols = 80, graceMs = 1000 })
  end)
  count("terminal write", "1", function() return check(term:write("echo bench-$((6*7))\n")) end)
  local out = ""
  while not out:find("bench%-42") do out = out .. check(term:read(10000)) end
  count("terminal inspectForeground", "1", function() return check(term:inspectForeground()) end)
  count("terminal terminate (cooperative)", ">=4", function() return check(term:terminate()) end)
  local h = count("spawn `sleep 30` (pipe), until pid", "9", function()
    return check(sp:spawn{ argv = { "sleep", "30" }, cwd = sb.cwd, graceMs = 500,
      stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe" } })
  end)
  count("terminate+wait+waitForExit, cooperative", "~5", function()
    check(h:terminate()); check(h:wait(10000)); return check(h:waitForExit(10000))
  end)
  local h2 = check(sp:spawn{ argv = { "/bin/sh", "-c", "trap '' TERM; sleep 30" }, cwd = sb.cwd, graceMs = 500,
    stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } } })
  mb.sleep(50)
  count("terminate+wait+waitForExit, TERM-ignoring", "~90-105", function()
    check(h2:terminate()); local o = check(h2:wait(10000)); check(h2:waitForExit(10000))
    if o.signal ~= "SIGKILL" then error("TERM-ignoring tree ended with " .. tostring(o.signal or o.exitCode), 0) end
  end)
  io.write(("  %-46s %7s %9s\n"):format("operation", "moonbox", "JS (§7)"))
  for _, r in ipairs(rows) do io.write(("  %-46s %7d %9s\n"):format(r.op, r.requests, r.js)) end
  result({ rows = rows })

elseif mode == "latency" then
  local n = math.tointeger(arg) or 50
  for _ = 1, 3 do spawn_true() end                           -- warm-up (connections, page cache)
  local t = {}
  for i = 1, n do
    local t0 = mb.now()
    spawn_true()
    t[i] = mb.now() - t0
  end
  local before = reqs()
  spawn_true()
  local per = reqs() - before
  io.write(("  moonbox spawn→exit `true`: median %.2f ms over %d (min %.2f), %d request(s) each\n"):format(
    median(t), n, math.min(table.unpack(t)), per))
  result({ median_ms = median(t), min_ms = math.min(table.unpack(t)), n = n, requests = per })

elseif mode == "throughput" then
  local bytes = math.tointeger(arg) or 268435456
  local argv = { "head", "-c", tostring(bytes), "/dev/zero" }
  local res = {}
  for _, m in ipairs({ "pipe", "collect" }) do
    local t0, c0, got = mb.now(), cpu_s(), 0
    local h
    if m == "pipe" then
      h = check(sp:spawn{ argv = argv, cwd = sb.cwd, graceMs = 1000,
        stdio = { stdin = "ignore", stdout = "pipe", stderr = { maxBytes = 4096 } } })
      while true do
        local c, err = h.stdout:read(60000)
        if not c then check(err == nil or nil, err, "read stdout") break end
        got = got + #c
      end
    else
      h = check(sp:spawn{ argv = argv, cwd = sb.cwd, graceMs = 1000,
        stdio = { stdin = "ignore", stdout = { maxBytes = 1048576 }, stderr = { maxBytes = 4096 } } })
    end
    local o = check(h:wait(600000))
    if o.exitCode ~= 0 then error("generator exited with " .. tostring(o.signal or o.exitCode), 0) end
    if m == "collect" then got = h.collected.stdout:readFrom(0).nextOffset end
    local ms = mb.now() - t0
    if got ~= bytes then error(("%s mode: got %d of %d bytes"):format(m, got, bytes), 0) end
    res[m] = { ms = ms, mb_s = bytes / 1048576 / (ms / 1000), client_cpu_s = cpu_s() - c0 }
    io.write(("  moonbox %-8s %d MiB in %.0f ms: %.1f MiB/s (client CPU %.2f s)\n"):format(m, bytes // 1048576, ms,
      res[m].mb_s, res[m].client_cpu_s))
  end
  result(res)

elseif mode == "echo" then
  local n = math.tointeger(arg) or 50
  local h = check(sp:spawn{ argv = { "cat" }, cwd = sb.cwd, graceMs = 1000,
    stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = 4096 } } })
  local block = ("0123456789abcdef"):rep(64)   -- 1 KiB
  local function once()
    check(h.stdin:write(block), nil, "stdin write")
    local got = 0
    while got < #block do got = got + #check(h.stdout:read(30000), nil, "stdout read") end
  end
  for _ = 1, 3 do once() end                                  -- warm-up
  local t = {}
  for i = 1, n do
    local t0 = mb.now()
    once()
    t[i] = mb.now() - t0
  end
  check(h.stdin:close(), nil, "stdin close")
  check(h:wait(30000), nil, "wait cat")
  io.write(("  moonbox 1 KiB write+read through cat: median %.2f ms over %d (min %.2f)\n"):format(median(t), n,
    math.min(table.unpack(t))))
  result({ median_ms = median(t), min_ms = math.min(table.unpack(t)), n = n })

elseif mode == "rss" then
  local bytes = math.tointeger(arg) or 1073741824
  local function status()
    local f = assert(io.open("/proc/self/status"))
    local s = f:read("a") f:close()
    return tonumber(s:match("VmHWM:%s+(%d+)")), tonumber(s:match("VmRSS:%s+(%d+)"))
  end
  local h = check(sp:spawn{ argv = { "truncate", "-s", tostring(bytes), "bench-big.bin" }, cwd = sb.cwd, graceMs = 1000,
    stdio = { stdin = "ignore", stdout = { maxBytes = 4096 }, stderr = { maxBytes = 4096 } } })
  local o = check(h:wait(60000))
  if o.exitCode ~= 0 then error("truncate failed: " .. h.collected.stderr:readFrom(0).text, 0) end
  local target = check(fs:resolve("bench-big.bin"))
  local info = check(fs:stat(target))
  if info.size ~= bytes then error(("big file is %s bytes, want %d"):format(tostring(info.size), bytes), 0) end
  local rows = {}
  local function measure(name, fn)
    collectgarbage("collect")
    -- Reset the peak to the current RSS (Linux: "5" > clear_refs), so VmHWM is this step's peak.
    local cr = io.open("/proc/self/clear_refs", "w")
    local reset = cr and cr:write("5") and cr:close() or false
    local _, base = status()
    local before = reqs()
    local code, n = fn()
    local hwm = status()
    rows[#rows + 1] = { op = name, baseline_kib = base, peak_kib = hwm, delta_kib = hwm - base, code = code,
      requests = reqs() - before, bytes = n, hwm_reset = reset and true or false }
    io.write(("  %-44s → %-14s baseline %d KiB, peak %d KiB: +%d KiB (%d request(s))%s\n"):format(name,
      tostring(code), base, hwm, hwm - base, reqs() - before, reset and "" or " [HWM not reset]"))
  end
  measure("fs:readBytes(1 GiB file, 1 MiB)", function()
    local r, err = fs:readBytes(target, 1048576)
    if r or not err or err.code ~= "FS_TOO_LARGE" then error("readBytes: expected FS_TOO_LARGE, got " .. tostring(r and #r or err), 0) end
    return err.code
  end)
  -- The same cap one layer down, without the size check fs does first: GET /files with a
  -- 1 MiB transport cap on a 1 GiB body (what would protect a file that grew after the stat).
  measure("envd:download(1 GiB file, max 1 MiB)", function()
    local r, err = sb.envd:download(target.targetKey, { max_bytes = 1048576 })
    if r then error("download of 1 GiB under a 1 MiB cap returned " .. #r .. " bytes", 0) end
    return err.code
  end)
  -- Control: a 1 MiB read that succeeds (the cost of holding the 1 MiB the caller asked for).
  check(sp:spawn{ argv = { "truncate", "-s", "1048576", "bench-1m.bin" }, cwd = sb.cwd, graceMs = 1000,
    stdio = { stdin = "ignore", stdout = { maxBytes = 4096 }, stderr = { maxBytes = 4096 } } }):wait(60000)
  local small = check(fs:resolve("bench-1m.bin"))
  measure("control: fs:readBytes(1 MiB file, 1 MiB)", function()
    local r = check(fs:readBytes(small, 1048576))
    return "ok", #r
  end)
  result({ rows = rows })
elseif mode == "calls" then
  -- Count every call into the C core: each function of moonbox.core and each method of its
  -- classes (the registry's moonbox.* metatables) goes through a counter from here on.
  local ccalls, by_name = 0, {}
  local function wrap(t, prefix)
    for k, f in pairs(t) do
      if type(f) == "function" and k:sub(1, 2) ~= "__" then
        local name = prefix .. k
        t[k] = function(...) ccalls = ccalls + 1 by_name[name] = (by_name[name] or 0) + 1 return f(...) end
      end
    end
  end
  wrap(require("moonbox.core"), "core.")
  for name, mt in pairs(debug.getregistry()) do
    if type(name) == "string" and name:match("^moonbox%.") and type(mt) == "table" and type(mt.__index) == "table" then
      wrap(mt.__index, name .. ":")
    end
  end
  local rows = {}
  for _, m in ipairs({ "collect", "inherit" }) do
    for _, size in ipairs({ 1024, 1048576, 268435456 }) do
      local r0, c0 = mb.stats().resumes, ccalls
      local out = m == "collect" and { maxBytes = 65536 } or "inherit"
      local h = check(sp:spawn{ argv = { "head", "-c", tostring(size), "/dev/zero" }, cwd = sb.cwd, graceMs = 1000,
        stdio = { stdin = "ignore", stdout = out, stderr = { maxBytes = 4096 } } })
      local o = check(h:wait(600000))
      if o.exitCode ~= 0 then error("head exited with " .. tostring(o.signal or o.exitCode), 0) end
      rows[#rows + 1] = { mode = m, bytes = size, resumes = mb.stats().resumes - r0, c_calls = ccalls - c0 }
      if os.getenv("BENCH_CALLS_DETAIL") then
        for k, v in pairs(by_name) do io.stderr:write("    ", k, " ", v, "\n") end
        by_name = {}
      end
      io.stderr:write(("  %-8s %9d bytes: %3d resumes, %3d Lua→C calls\n"):format(m, size,
        rows[#rows].resumes, rows[#rows].c_calls))
    end
  end
  io.stderr:write("RESULT ", cjson.encode({ rows = rows }), "\n")
elseif mode == "write-rss" then
  local bytes = math.tointeger(arg) or 209715200
  local target = check(fs:resolve("bench-write.bin"))
  local content = ("w"):rep(bytes)
  collectgarbage("collect")
  local cr = io.open("/proc/self/clear_refs", "w")
  local reset = cr and cr:write("5") and cr:close() or false
  local f = assert(io.open("/proc/self/status"))
  local st = f:read("a") f:close()
  local base = tonumber(st:match("VmRSS:%s+(%d+)"))
  local t0 = mb.now()
  check(fs:writeText(target, content))
  local ms = mb.now() - t0
  f = assert(io.open("/proc/self/status"))
  st = f:read("a") f:close()
  local hwm = tonumber(st:match("VmHWM:%s+(%d+)"))
  -- the content itself is part of the baseline: the write's own cost is the peak above it
  local extra = (hwm - base) * 1024
  io.write(("  writeText(%d MiB): peak %.1f MiB over a baseline that holds the content: %.2f × the content in all%s (%.0f ms)\n"):format(
    bytes // 1048576, extra / 1048576, 1 + extra / bytes, reset and "" or " [HWM not reset]", ms))
  result({ bytes = bytes, extra_bytes = extra, ratio = 1 + extra / bytes, ms = ms })
else
  error("usage: moonbox run compose.lua providers_ops.lua counts|latency N|throughput BYTES|rss BYTES|calls|write-rss BYTES", 0)
end
