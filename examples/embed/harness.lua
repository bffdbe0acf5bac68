-- harness.lua — the Lua half of the example: embed.c loads this file once and calls its
-- functions; command and feed run as moonbox tasks, waiting() is an ordinary call.
local mb = require "moonbox"

local H = {}
local proc, waiting = nil, false

-- Runs a command in the sandbox that waits for one line on its stdin, and prints what it
-- writes as it comes. → its exit code
function H.command(ctx)
  local sb = assert(ctx.e2b:sandbox())
  proc = assert(ctx.subprocess:spawn{
    argv = { "/bin/sh", "-c", 'echo "sandbox: waiting for a line"; read line; echo "sandbox: got $line"' },
    cwd = sb.cwd, graceMs = 1000,
    stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = 4096 } } })
  while true do
    local chunk = proc.stdout:read(60000)
    if not chunk then break end
    io.write(chunk)
    io.flush()
    if chunk:find("\n", 1, true) then waiting = true end
  end
  local outcome = assert(proc:wait(60000))
  proc, waiting = nil, false
  return outcome.exitCode or -1
end

-- true while the command runs and waits for its line.
function H.waiting() return waiting end

-- Gives the running command its line and closes its stdin. The command may read the line and
-- end while this task waits on the write or the close: then there is nothing left to close.
-- → true | nil, err
function H.feed(_, line)
  local p = proc
  if not p then return nil, mb.error("MB_CLOSED", "no command is running") end
  local ok, err = p.stdin:write(line .. "\n")
  if not ok then return nil, err end
  if proc ~= p then return true end
  local closed, cerr = p.stdin:close()
  if closed or proc ~= p then return true end
  return nil, cerr
end

return H
