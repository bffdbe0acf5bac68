-- moonbox demo: write C through ctx.fs, compile and run it through ctx.subprocess with streamed
-- output, edit and rerun, drive an interactive terminal, terminate a TERM-ignoring process tree,
-- then show that nothing is left behind. Runs unchanged on E2B's cloud with E2B_API_KEY set.
local mb = require "moonbox"
local fs, sp = ctx.fs, ctx.subprocess
local T0 = mb.now()
local sb = assert(ctx.e2b:sandbox())
local function say(fmt, ...) io.write(("[%7.1f ms] "):format(mb.now() - T0), fmt:format(...), "\n") io.flush() end
say("sandbox %s ready, cwd %s", sb.id, sb.cwd)

local function run(argv, label)
  local t0 = mb.now()
  local h = assert(sp:spawn{ argv = argv, cwd = sb.cwd, graceMs = 1000,
    stdio = { stdin = "ignore", stdout = "pipe", stderr = { maxBytes = 4096 } } })
  while true do                                     -- streamed output, as it comes
    local chunk = h.stdout:read(30000)
    if not chunk then break end
    io.write("    | ", (chunk:gsub("\n(.)", "\n    | %1")))
  end
  local o = assert(h:wait(30000))
  local err = h.collected.stderr:readFrom(0).text
  if err ~= "" then io.write("    ! ", err) end
  say("%s: %s (%.1f ms)", label, o.signal or ("exit " .. o.exitCode), mb.now() - t0)
  return o
end

local src = assert(fs:resolve("hello.c"))
local w = assert(fs:writeText(src, [[
#include <stdio.h>
int main(void) {
  for (int i = 1; i <= 3; i++) printf("hello %d from the sandbox\n", i);
  return 0;
}
]], { kind = "createIfAbsent" }))
say("wrote %s (%s, version %s)", src.displayPath, w.operation, w.version)

local cc = sp:resolveExecutable("cc") or sp:resolveExecutable("gcc") or sp:resolveExecutable("tcc")
if cc then
  run({ cc, "-O0", "-o", "hello", "hello.c" }, "compile")
  run({ "./hello" }, "run")
  local e = assert(fs:editText(src, { oldString = "hello %d", newString = "goodbye %d ($& stays literal)" }))
  say("edited, new version %s", e.version)
  run({ cc, "-O0", "-o", "hello", "hello.c" }, "recompile")
  run({ "./hello" }, "rerun")
else
  say("no C compiler in this sandbox template: running the program text through sh instead")
  run({ "/bin/sh", "-c", "grep -c hello hello.c" }, "inspect")
end

-- An interactive terminal.
local term = assert(sp:spawnTerminal{ argv = { "/bin/sh", "-i" }, cwd = sb.cwd, env = { PS1 = "$ ", TERM = "dumb" },
  rows = 24, cols = 80, graceMs = 1000 })
assert(term:write("read name; echo \"hi $name, 6*7=$((6*7))\"\n"))
mb.sleep(100)
assert(term:write("moonbox\n"))
local out = ""
while not out:find("6%*7=42") do out = out .. assert(term:read(10000)) end
say("terminal said: %s", out:match("hi moonbox, 6%*7=42"))
local fg = assert(term:inspectForeground())
say("terminal foreground group %d (shell %d), waiting for input: %s", fg.processGroupId, term.pid, tostring(fg.inputWaiting))
assert(term:terminate())
say("terminal session terminated")

-- A process tree that ignores TERM, with a double-forked grandchild.
local t0 = mb.now()
local h = assert(sp:spawn{ argv = { "/bin/sh", "-c", "trap '' TERM; (trap '' TERM; setsid sleep 600 &); sleep 600" },
  cwd = sb.cwd, graceMs = 500, stdio = { stdin = "ignore", stdout = "inherit", stderr = "inherit" } })
mb.sleep(100)
assert(h:terminate())
local o = assert(h:wait(10000))
say("TERM-ignoring tree (pgid %d): %s after %.0f ms; tree empty: %s", h.pid, o.signal, mb.now() - t0,
  tostring(h:waitForExit(5000)))

local probe = assert(sp:spawn{ argv = { "/bin/sh", "-c", "ps -e -o pid=,args= 2>/dev/null | grep -c '[s]leep 600' || true" },
  cwd = sb.cwd, graceMs = 500, stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } } })
probe:wait(10000)
say("'sleep 600' processes left in the sandbox: %s", (probe.collected.stdout:readFrom(0).text:gsub("%s+$", "")))
say("requests so far: %d; disposing (sandbox deleted%s)", mb.http.stats().requests,
  ctx.e2b.sandboxd and ", local sandboxd stopped" or "")

-- After disposal (compose.run calls this epilogue): show on the host that nothing is left.
local d = ctx.e2b.sandboxd
local sandbox_id = sb.id
return function()
  if not d then
    say("sandbox %s deleted in the cloud", sandbox_id)
    return
  end
  local function exists(path) local f = io.open(path, "r") if f then f:close() return true end return false end
  local mounts = 0
  for line in io.lines("/proc/mounts") do if line:find(d.state, 1, true) then mounts = mounts + 1 end end
  say("after disposal: local sandboxd running: %s, its state directory present: %s, mounts left: %d",
    tostring(d.pid ~= nil and exists("/proc/" .. d.pid .. "/status")), tostring(exists(d.state)), mounts)
end
