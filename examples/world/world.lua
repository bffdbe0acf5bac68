-- The portable execution world: one script, written only against ctx.fs, the consumers
-- (ctx.bash, ctx.terminal, ctx.lsp) and workspace sync (ctx.workspace), run with either
-- composition:
--   moonbox run examples/world/compose-host.lua examples/world/world.lua
--   moonbox run examples/world/compose-sandbox.lua examples/world/world.lua
-- It writes a C file with an error, gets clangd's diagnostic, fixes the file with editText,
-- compiles and runs it with the bash tool, reads a background job incrementally, drives a
-- terminal session, pushes a host project into the world and pulls the world's changes back,
-- and prints a transcript: the same on both worlds apart from the timings.
local mb = require "moonbox"
local fs, bash, term, lsp = ctx.fs, ctx.bash, ctx.terminal, ctx.lsp
local T0 = mb.now()
local function say(fmt, ...) io.write(("[%7.1f ms] "):format(mb.now() - T0), fmt:format(...), "\n") io.flush() end
local function lines_of(s) local t = {} for l in s:gmatch("([^\n]*)\n") do t[#t + 1] = l end return t end
local function indent(s) return (s:gsub("\n$", ""):gsub("\n", "\n             | ")) end

-- A private workspace under the provider's working directory (its name is not printed).
local base = assert(fs:resolve("."))
local ws = assert(fs:resolve(("moonbox-world.%d.%d"):format(mb.core.getpid(), math.random(1 << 30)),
  { cwd = base.targetKey }))
local wsdir = fs:processPath(ws)
local made = assert(bash:run{ command = "mkdir -m 700 -- \"$W\"", cwd = base.targetKey, env = { W = wsdir } })
if made.exitCode ~= 0 then error("cannot make the workspace: " .. made.stderr) end
say("workspace ready")

-- 1. A C file with an error, and clangd's word on it.
local src = assert(fs:resolve("main.c", { cwd = wsdir }))
local C = [[
#include <stdio.h>

static int square(int x) { return x * x; }

int main(void) {
  for (int i = 1; i <= 3; i++) printf("%d squared is %d\n", i, square(i))
  return 0;
}
]]
assert(fs:writeText(src, C, { kind = "createIfAbsent" }))
say("wrote main.c (%d lines)", #lines_of(C))
-- where `square` is called (LSP positions are 0-based)
local call
for i, line in ipairs(lines_of(C)) do
  local col = line:find("square(i)", 1, true)
  if col then call = { line = i - 1, character = col - 1 } end
end
local c = assert(lsp:start{ root = wsdir })
say("clangd started")
assert(c:open("main.c"))
for _, d in ipairs(assert(c:diagnostics("main.c"))) do
  say("clangd: main.c:%d:%d: %s", math.tointeger(d.range.start.line) + 1, math.tointeger(d.range.start.character) + 1,
    d.message)
end

-- 2. The fix, through the filesystem seam; clangd re-reads it.
local e = assert(fs:editText(src, { oldString = "square(i))\n", newString = "square(i));\n" }))
say("editText: fixed main.c (version changed: %s)", tostring(e.version ~= nil))
assert(c:change("main.c"))
local left = assert(c:diagnostics("main.c"))
say("clangd: %d diagnostics", #left)
local h = assert(c:hover("main.c", call))
say("clangd hover on square: %s", (h.contents.value:match("```cpp\n(.-)\n```") or "?"))
local defs = assert(c:definition("main.c", call))
say("clangd definition of square: main.c:%d", math.tointeger(defs[1].range.start.line) + 1)
assert(c:shutdown())
say("clangd shut down")

-- 3. Compile and run with the bash tool.
local r = assert(bash:run{ command = "cc -Wall -Werror -o main main.c && ./main", cwd = wsdir })
say("bash: cc && ./main → exit %d\n             | %s", r.exitCode, indent(r.stdout))

-- 4. A background job, read incrementally.
local job = assert(bash:start{ command = "for i in 1 2 3; do echo tick $i; sleep 0.2; done; echo done >&2",
  cwd = wsdir })
local cursor, lines, pending = nil, {}, ""
while true do
  local d = bash:read(job, cursor)
  cursor = d.cursor
  pending = pending .. d.stdout
  for line in pending:gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  pending = pending:match("[^\n]*$")
  if d.stderr ~= "" then lines[#lines + 1] = "[stderr] " .. d.stderr:gsub("\n$", "") end
  if d.status ~= "running" then break end
  mb.sleep(50)
end
say("bash job: %d lines read incrementally: %s; %s, exit %d", #lines, table.concat(lines, " / "),
  bash:read(job, cursor).status, bash:read(job, cursor).exitCode)

-- 5. An interactive terminal: cd, a failing command, its exit status.
local t = assert(term:open{ cwd = wsdir })
local o = assert(t:send("mkdir -p sub && cd sub && basename \"$PWD\""))
say("terminal: cd sub → %s (exit %d)", o.output:gsub("\n$", ""), o.exitCode)
o = assert(t:send("ls no-such-file"))
say("terminal: ls no-such-file → exit %d\n             | %s", o.exitCode, indent(o.output))
o = assert(t:send("echo \"the last status was $?\""))
say("terminal: %s", o.output:gsub("\n$", ""))
assert(t:close())
say("terminal closed")

-- 6. Workspace sync: a host project pushed into the world (its .gitignore followed), changed
-- and built there, its changes pulled back (the build output stays excluded).
local hostdir = assert(io.popen("mktemp -d /tmp/moonbox-world-host.XXXXXX")):read("l")
local function put(rel, s)
  os.execute(("mkdir -p '%s/%s'"):format(hostdir, rel:match("^(.*)/") or "."))
  local f = assert(io.open(hostdir .. "/" .. rel, "w")) f:write(s) f:close()
end
put("src/app.c", "int main(void) { return 0; }\n")
put("README.md", "# app\n")
put(".gitignore", "*.o\n")
put("old.o", "stale build output\n")
local sync = ctx.workspace
local pushed = assert(sync:push{ from = hostdir, to = wsdir .. "/project", gitignore = true })
say("sync push: %d files, %d directories, %d excluded", pushed.files, pushed.dirs, pushed.excluded)
r = assert(bash:run{ command = "echo '/* reviewed */' >> src/app.c && echo notes > NOTES.md && rm README.md && "
  .. "cc -c src/app.c -o app.o", cwd = wsdir .. "/project" })
say("bash: edited, removed, built in the world → exit %d", r.exitCode)
local d = assert(sync:diff{ from = wsdir .. "/project", to = hostdir })
say("sync diff: added %s; modified %s; deleted %s; %d conflicts", table.concat(d.added, ","), table.concat(d.modified, ","),
  table.concat(d.deleted, ","), #d.conflicts)
local p = assert(sync:pull{ from = wsdir .. "/project", to = hostdir })
local f = assert(io.open(hostdir .. "/src/app.c"))
say("sync pull: %d files fetched; host src/app.c ends with %s; app.o left in the world", p.files,
  (f:read("a"):match("([^\n]*)\n$")))
f:close()
os.execute(("rm -rf '%s'"):format(hostdir))

assert(bash:run{ command = "rm -rf -- \"$W\"", cwd = base.targetKey, env = { W = wsdir } })
say("workspace removed")
