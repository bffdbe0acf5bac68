-- `moonbox sandbox connect ID` against the suite's sandboxd, on a pseudo-terminal driven by
-- spec/support/pty_run.py: the remote PTY has this terminal's size and follows its resizes,
-- typed bytes (^C too) reach the remote shell, the shell's exit status is connect's, and this
-- terminal's modes are back (ICANON, ECHO) however the session ended.
local cjson = require "cjson"

local cli = require "support.cli"
local q = cli.q

local HELPER = "spec/support/pty_run.py"

-- Runs `moonbox <args>` on a rows × cols terminal through the steps (pty_run.py's). → result
-- { status, output, failed, modes = { before, after, ... } }
local function on_pty(args, rows, cols, steps, wait)
  local script = os.tmpname()
  cli.write(script, cjson.encode({ rows = rows, cols = cols, steps = steps, wait = wait or 60 }))
  local h = assert(io.popen(("python3 %s %s -- %s %s"):format(q(HELPER), q(script), q(cli.bin), args)))
  local out = h:read("a")
  h:close()
  os.remove(script)
  local ok, r = pcall(cjson.decode, out)
  assert(ok, "pty_run.py printed no result: " .. out)
  for _, k in ipairs({ "status", "failed" }) do
    if r[k] == cjson.null then r[k] = nil end
  end
  return r
end

-- The local modes of a cooked terminal (a fresh one, and one moonbox gave back).
local COOKED = { icanon = true, echo = true, isig = true, opost = true }
local RAW = { icanon = false, echo = false, isig = false, opost = false }

-- A command typed at the remote prompt; its output is told from its echo by arithmetic
-- (the echo shows "$((6*7))", only the shell's output shows 42).
local function typed(line) return { send = line .. "\r" } end

describe("moonbox sandbox connect #sandboxd", function()
  local mb, client, id
  setup(function()
    mb = require "moonbox"
    client = mb.run(function() return assert(require("moonbox.e2b").client{}) end)
  end)
  before_each(function()
    id = mb.run(function() return assert(client.api:create{ timeout_ms = 120000, metadata = { cli = "connect-spec" } }).id end)
  end)
  after_each(function() mb.run(function() client:kill(id) end) end)

  it("opens a shell on a PTY of this terminal's size, follows a resize, and exits with the shell's status", function()
    local r = on_pty("sandbox connect " .. id, 30, 100, {
      { expect = "$ " },                     -- the prompt: the terminal is raw by now
      typed("echo ready-$((20+22))"), { expect = "ready-42" },
      { modes = "during" },
      typed("stty size"), { expect = "30 100" },
      typed("echo hello-$((6*7))"), { expect = "hello-42" },
      typed("echo term=$TERM tty=$(tty | cut -c1-8)"), { expect = "term=xterm-256color tty=/dev/pts" },
      { resize = { 40, 120 } },
      -- the Update travels on its own: wait for it in the sandbox, then show the size
      typed([[while [ "$(stty size)" = "30 100" ]; do sleep 0.1; done; echo now-$(stty size | tr ' ' x)]]),
      { expect = "now-40x120" },
      typed("exit 3"),
    })
    assert.is_nil(r.failed, r.output)
    assert.are.equal(3, r.status, r.output)
    assert.are.same(COOKED, r.modes.before)
    assert.are.same(RAW, r.modes.during)     -- raw while connected
    assert.are.same(COOKED, r.modes.after)   -- and given back
    -- nothing of moonbox's own
    assert.is_nil(r.output:find("moonbox", 1, true), r.output)
  end)

  it("^C is a byte for the remote terminal: it interrupts the remote sleep and the shell lives on", function()
    local r = on_pty("sandbox connect " .. id, 24, 80, {
      typed("echo ready-$((1+1))"), { expect = "ready-2" },
      typed("sleep 1000"), { sleep = 1 },
      { send = "\3" },
      -- $? is 130 after a foreground command SIGINT ended
      typed("echo alive-$?-$((3*3))"), { expect = "alive-130-9" },
      typed("exit"),
    })
    assert.is_nil(r.failed, r.output)
    assert.are.equal(0, r.status, r.output)
    assert.are.same(COOKED, r.modes.after)
  end)

  it("the shell's own end: an exit status above 128 is passed on, the terminal restored", function()
    local r = on_pty("sandbox connect " .. id, 24, 80, {
      typed("echo ready-$((1+1))"), { expect = "ready-2" },
      typed("kill -KILL $$"),
    })
    assert.is_nil(r.failed, r.output)
    assert.are.equal(128 + 9, r.status, r.output)
    assert.are.same(COOKED, r.modes.after)
  end)

  it("SIGTERM here restores the terminal, ends the remote shell and exits 143", function()
    local r = on_pty("sandbox connect " .. id, 24, 80, {
      typed("echo ready-$$-$((1+1))"), { expect = "-2" },
      { modes = "during" },
      { signal = "SIGTERM" },
    })
    assert.is_nil(r.failed, r.output)
    assert.are.equal(143, r.status, r.output)
    assert.are.same(RAW, r.modes.during)
    assert.are.same(COOKED, r.modes.after)
    -- the remote shell went with its terminal
    local pid = r.output:match("ready%-(%d+)%-2")
    assert.truthy(pid, r.output)
    local code, out, err = cli.moonbox("sandbox exec " .. id .. " -- kill -0 " .. pid, { stdin_null = true })
    assert.are.equal(1, code, out .. err)
  end)

  it("the sandbox killed under it: one line, exit 1, the terminal restored", function()
    local r = on_pty("sandbox connect " .. id, 24, 80, {
      typed("echo ready-$((1+1))"), { expect = "ready-2" },
      { run = { cli.bin, "sandbox", "kill", id } },
    })
    assert.is_nil(r.failed, r.output)
    assert.are.equal(1, r.status, r.output)
    assert.are.same(COOKED, r.modes.after)
    -- on a line of its own after the remote prompt
    assert.truthy(r.output:find("%$ \r\nmoonbox: E2B_SANDBOX_GONE: sandbox " .. id .. " [^\n]*\r\n$"), r.output)
  end)

  it("an unknown sandbox is one line, exit 1; stdin not a terminal is refused, exit 2", function()
    local r = on_pty("sandbox connect nosuchsandbox", 24, 80, {})
    assert.is_nil(r.failed, r.output)
    assert.are.equal(1, r.status)
    assert.are.equal("moonbox: E2B_NOT_FOUND: sandbox nosuchsandbox not found\r\n", r.output)
    assert.are.same(COOKED, r.modes.after)
    local code, out, err = cli.moonbox("sandbox connect " .. id, { stdin_null = true })
    assert.are.same({ 2, "", "moonbox: sandbox connect: stdin is not a terminal; run 'moonbox sandbox connect --help' for usage\n" },
      { code, out, err })
    -- a usage mistake comes first, before the terminal is looked at
    code, out, err = cli.moonbox("sandbox connect " .. id .. " extra", { stdin_null = true })
    assert.are.same({ 2, "" }, { code, out })
    assert.truthy(err:find("^moonbox: sandbox connect: unexpected argument extra;"), err)
  end)
end)

describe("core.tty_raw, tty_size, tty_modes", function()
  it("raw mode and back (restore, to-be-closed, once), the size; not a terminal is MB_INVALID, a closed descriptor MB_IO", function()
    local script = os.tmpname()
    cli.write(script, [[
local core = require "moonbox.core"
local function m(t) return ("%s %s %s %s"):format(t.icanon, t.echo, t.isig, t.opost) end
local out = {}
out[#out + 1] = "size " .. table.concat({ core.tty_size(0) }, " ")
out[#out + 1] = "before " .. m(core.tty_modes(0))
do
  local t <close> = assert(core.tty_raw(0))
  out[#out + 1] = "raw " .. m(core.tty_modes(0)) .. " fd " .. t:fd() .. " " .. tostring(t:restored())
end
out[#out + 1] = "closed " .. m(core.tty_modes(0))
local t = assert(core.tty_raw(0))
out[#out + 1] = "restore " .. tostring(t:restore()) .. " " .. tostring(t:restore()) .. " " .. tostring(t:restored())
out[#out + 1] = "after " .. m(core.tty_modes(0))
local p = assert(core.secret_pipe("x"))
local _, e1 = core.tty_raw(p:fd())
local _, e2 = core.tty_size(p:fd())
local _, e3 = core.tty_modes(p:fd())
local closed = p:fd()                 -- a descriptor number that is closed once p is
p:close()
local _, e4 = core.tty_raw(closed)
out[#out + 1] = "errors " .. e1.code .. " " .. e2.code .. " " .. e3.code .. " " .. e4.code
out[#out + 1] = e1.message:gsub("%d+", "N")
out[#out + 1] = "arg " .. tostring((pcall(core.tty_raw, -1)))
io.write(table.concat(out, "\n"), "\n")
]])
    local r = on_pty(q(script), 25, 81, {})
    os.remove(script)
    assert.are.equal(0, r.status, r.output)
    assert.are.equal(table.concat({
      "size 25 81", "before true true true true", "raw false false false false fd 0 false", "closed true true true true",
      "restore true true true", "after true true true true", "errors MB_INVALID MB_INVALID MB_INVALID MB_IO",
      "tty_raw: descriptor N is not a terminal", "arg false" }, "\r\n") .. "\r\n", r.output)
  end)
end)
