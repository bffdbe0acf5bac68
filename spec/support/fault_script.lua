-- Run by spec/fault_spec.lua as `moonbox run <composition> fault_script.lua MODE`.
--   wait           print "ready <sandbox id> <state dir or ->", then block in a command
--   kill-sandboxd  start a streaming command, a large write and a terminal read, SIGKILL the
--                  sandboxd whose pid is $MB_FAULT_SANDBOXD_PID, and print each blocked call's
--                  outcome: "<what> <error code> <ms after the kill>"
local mb = require "moonbox"
local _, mode = ...         -- the script is called with (ctx, args...)
local sb = assert(ctx.e2b:sandbox())

if mode == "wait" then
  io.write("ready ", sb.id, " ", ctx.e2b.sandboxd and ctx.e2b.sandboxd.state or "-", "\n")
  io.flush()
  local h = assert(ctx.subprocess:spawn{ argv = { "sleep", "1000" }, cwd = sb.cwd, graceMs = 500,
    stdio = { stdin = "ignore", stdout = "pipe", stderr = { maxBytes = 100 } } })
  h:wait()
  return
end

assert(mode == "kill-sandboxd", "unknown mode " .. tostring(mode))
local pid = assert(os.getenv("MB_FAULT_SANDBOXD_PID"), "MB_FAULT_SANDBOXD_PID")
local results, t_kill = {}, nil
local function record(what, err)
  results[#results + 1] = ("%s %s %d"):format(what, err and err.code or "OK", math.floor(mb.now() - t_kill))
end
local cmd = assert(ctx.subprocess:spawn{ argv = { "yes" }, cwd = sb.cwd, graceMs = 100,
  stdio = { stdin = "ignore", stdout = "pipe", stderr = { maxBytes = 100 } } })
assert(cmd.stdout:read(30000))
local term = assert(ctx.subprocess:spawnTerminal{ argv = { "/bin/sh" } })
local target = assert(ctx.fs:resolve("big.bin"))
local tasks = {
  mb.spawn(function()
    while true do
      local c, err = cmd.stdout:read(60000)
      if not c then
        local _, werr = cmd:wait(60000)
        record("command", err or werr)
        return
      end
    end
  end),
  mb.spawn(function()
    while true do
      local c, err = term:read(60000)
      if not c then
        local _, werr = term:wait(60000)
        record("terminal", err or werr)
        return
      end
    end
  end),
  mb.spawn(function()
    local _, err = ctx.fs:writeText(target, ("x"):rep(256 * 1024 * 1024))
    record("write", err)
  end),
}
mb.sleep(300)                 -- the upload is on its way
t_kill = mb.now()
os.execute("kill -9 " .. pid)
for _, t in ipairs(tasks) do t:join(60000) end
table.sort(results)
for _, r in ipairs(results) do io.write(r, "\n") end
io.flush()
