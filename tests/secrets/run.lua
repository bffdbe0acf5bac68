-- The script of the watched run (tests/secrets/secrets.test.mjs): it tells the driver the run's
-- secrets on stdout (a pipe, never a command line), starts long-lived processes that the
-- scanner must see (each named by a marker in its argv), and keeps moonbox starting short-lived
-- ones (mbwrap tool calls, commands, uploads) until the driver creates the file MB_SECRETS_GO.
local mb = require "moonbox"
local fs, sp = ctx.fs, ctx.subprocess
local go = assert(os.getenv("MB_SECRETS_GO"), "MB_SECRETS_GO is not set")
local function say(...) io.write(table.concat({ ... }, " "), "\n") io.flush() end

local sb = assert(ctx.e2b:sandbox())
local owner = ctx.e2b
assert(owner.sandboxd, "the run must use the embedded sandboxd (no E2B_* in the environment)")
say("SECRET api-key", owner.sandboxd.api_key)
assert(sb.envd.access_token, "a secure sandbox has an envd access token")
say("SECRET envd-token", sb.envd.access_token)
say("SANDBOXD", tostring(owner.sandboxd.pid))

-- `; :` keeps sh from exec'ing sleep, so the marker stays on a command line
local cmd = assert(sp:spawn{ argv = { "/bin/sh", "-c", "sleep 600; :", "mb-secrets-command" }, cwd = sb.cwd,
  graceMs = 500, stdio = { stdin = "pipe", stdout = "pipe", stderr = "pipe" } })
local term = assert(sp:spawnTerminal{ argv = { "/bin/sh", "-c", "sleep 600; :", "mb-secrets-terminal" },
  cwd = sb.cwd, rows = 24, cols = 80, graceMs = 500 })
say("READY")

local function exists(p)
  local f = io.open(p, "r")
  if f then f:close() end
  return f ~= nil
end
local rounds = 0
while not exists(go) do
  rounds = rounds + 1
  local target = assert(fs:resolve(("churn-%d.txt"):format(rounds % 4)))
  assert(fs:writeText(target, ("round %d\n"):format(rounds)))
  assert(fs:readText(target))
  assert(fs:listDir(assert(fs:resolve("."))))
  local h = assert(sp:spawn{ argv = { "/bin/sh", "-c", "echo churn; :", "mb-secrets-churn" }, cwd = sb.cwd, graceMs = 500,
    stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe" } })
  assert(h:wait(30000))
  mb.sleep(10)
end
cmd:terminate()
term:terminate()
assert(cmd:wait(30000))
say("DONE", tostring(rounds))
