-- The E2B subprocess provider against a scripted sandbox: one Start per spawn, in-band frames,
-- env policy on the host, termination and terminals.
local fake_mb = require "support.fake_mb"
local fake_sandbox = require "support.fake_sandbox"
local errors = require "moonbox.errors"

local mb, spmod
local function make(handlers)
  local sb, owner, log = fake_sandbox.new(handlers)
  local sp = spmod.new({ e2b = owner }, { frameLineMax = 40000, pipeQueue = 4 })
  return sp, sb, log
end
local function ev(t) return { event = t } end
local function spec(over)
  local s = { argv = { "cc", "-o", "x", "x.c" }, cwd = "/w", graceMs = 100,
    stdio = { stdin = "ignore", stdout = { maxBytes = 1000 }, stderr = { maxBytes = 1000 } } }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end
local function count(log, kind)
  local n = 0
  for _, e in ipairs(log) do if e.kind == kind then n = n + 1 end end
  return n
end

describe("moonbox.subprocess (unit, scripted sandbox)", function()
  setup(function() mb = fake_mb.install(); spmod = require "moonbox.subprocess" end)
  teardown(function() fake_mb.uninstall() end)

  describe("collector", function()
    it("keeps a bounded tail with whole-stream offsets", function()
      local c = spmod.collector(5)
      c:add("abc"); c:add("defg")
      local r = c:readFrom(0)
      assert.are.same({ text = "cdefg", nextOffset = 7, lossy = true }, r)
      assert.are.same({ text = "fg", nextOffset = 7, lossy = false }, c:readFrom(5))
      assert.are.same({ text = "", nextOffset = 7, lossy = false }, c:readFrom(7))
    end)
    it("points at the spill only when lossy and the spill is complete", function()
      local c = spmod.collector(2, { maxBytes = 5, path = "/r/s" })
      c:add("abcd")
      assert.are.equal("/r/s", c:readFrom(0).spillPath)
      assert.is_nil(c:readFrom(3).spillPath)
      c:add("ef")
      assert.is_nil(c:readFrom(0).spillPath)   -- 6 > 5: the wrapper dropped the spill
    end)
  end)

  it("maps envd end events of PTY processes", function()
    assert.are.same({ exitCode = 3 }, spmod.outcome_from_end({ exitCode = 3, exited = true, status = "exit status 3" }))
    assert.are.same({ signal = "SIGKILL" }, spmod.outcome_from_end({ exitCode = -1, status = "signal: killed" }))
    assert.are.same({ signal = "SIGHUP" }, spmod.outcome_from_end({ exitCode = -1, status = "signal: hangup" }))
  end)

  it("spawns with one Start of mbwrap run, scrubbed env and the argv after --", function()
    local core
    local sp, sb, log = make{ stream = function(method, msg)
      return fake_sandbox.stream{
        ev{ start = { pid = 41 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 77", { "o", "built\n" }, { "e", "warn\n" }, "!exit 3", "!empty", "!done" }) } },
        ev{ ["end"] = { exited = true, status = "exit status 0" } },
      }
    end }
    core = sb.core
    local h, out = mb.run(function()
      local h = assert(sp:spawn(spec{ env = { CC_TOKEN = "opt-in", HOME = false } }))
      local pid = h.pid
      return h, { pid = pid, outcome = assert(h:wait()), empty = h:waitForExit(0) }
    end)
    assert.are.equal(1, #log)
    local method, msg = log[1].args[1], log[1].args[2]
    assert.are.equal("process.Process/Start", method)
    assert.are.equal(sb.wrapper, msg.process.cmd)
    assert.are.equal("/w", msg.process.cwd)
    assert.are.equal(false, msg.stdin)
    assert.are.same({ "run", "-g", "100", "-E", "CC_TOKEN=opt-in", "-E", "LANG=C.UTF-8", "-E", "PATH=/usr/bin:/bin",
      "--", "cc", "-o", "x", "x.c" }, msg.process.args)
    assert.are.equal(77, out.pid)
    assert.are.same({ exitCode = 3 }, out.outcome)
    assert.is_true(out.empty)
    assert.are.equal("built\n", h.collected.stdout:readFrom(0).text)
    assert.are.equal("warn\n", h.collected.stderr:readFrom(0).text)
  end)

  it("reports a real signal name", function()
    local core
    local sp, sb = make{ stream = function()
      return fake_sandbox.stream{ ev{ start = { pid = 5 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 6", { "o", "partial" }, "!signal 11", "!empty", "!done" }) } } }
    end }
    core = sb.core
    local h, outcome = mb.run(function() local h = assert(sp:spawn(spec())) return h, h:wait() end)
    assert.are.same({ signal = "SIGSEGV" }, outcome)
    assert.are.equal("partial", h.collected.stdout:readFrom(0).text)
  end)

  it("fails the spawn itself when the program cannot be executed", function()
    local core
    local sp, sb = make{ stream = function()
      return fake_sandbox.stream{ ev{ start = { pid = 5 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 6", "!spawn-error 2 " .. core.b64encode("No such file or directory"), "!empty", "!done" }) } } }
    end }
    core = sb.core
    local h, err = mb.run(function() return sp:spawn(spec{ argv = { "nope" } }) end)
    assert.is_nil(h); assert.are.equal("SPAWN_FAILED", err.code); assert.are.equal(2, err.errno)
    assert.truthy(err.message:find("No such file", 1, true))
  end)

  it("fails done when the exec failure arrives after the group id", function()
    local core
    local sp, sb = make{ stream = function()
      return fake_sandbox.stream{ ev{ start = { pid = 5 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 6" }) } }, { sleep = 1 },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!spawn-error 13 " .. core.b64encode("Permission denied"), "!empty", "!done" }) } } }
    end }
    core = sb.core
    local r, err = mb.run(function() local h = assert(sp:spawn(spec())) return h:wait() end)
    assert.is_nil(r); assert.are.equal("SPAWN_FAILED", err.code); assert.are.equal(13, err.errno)
  end)

  it("terminates with one SendSignal to the wrapper; done waits for the real death", function()
    local core
    local sp, sb, log = make{
      stream = function()
        return fake_sandbox.stream{ ev{ start = { pid = 41 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 77" }) } },
          { sleep = 1000 },                                 -- TERM ignored: KILL after the grace
          ev{ data = { stdout = fake_sandbox.frames(core, { "!signal 9", "!empty", "!done" }) } } }
      end,
      unary = function(method, msg) return {} end,
    }
    core = sb.core
    local r = mb.run(function()
      local h = assert(sp:spawn(spec{ graceMs = 500 }))
      mb.sleep(10)
      assert(h:terminate()); assert(h:terminate())          -- idempotent
      local before = h:wait(100)
      return { early = before, outcome = h:wait(), exited = h:waitForExit(0) }
    end)
    assert.are.equal(1, count(log, "unary"))
    local sig = log[2]
    assert.are.equal("process.Process/SendSignal", sig.args[1])
    assert.are.same({ process = { pid = 41 }, signal = "SIGNAL_SIGTERM" }, sig.args[2])
    assert.is_nil(r.early)
    assert.are.same({ signal = "SIGKILL" }, r.outcome)
    assert.is_true(r.exited)
  end)

  it("settles done after the drain grace while a descendant keeps the tree alive", function()
    local core
    local sp, sb = make{ stream = function()
      return fake_sandbox.stream{ ev{ start = { pid = 1 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 2", "!exit 0" }) } },
        { sleep = 100000 },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!empty", "!done" }) } } }
    end }
    core = sb.core
    local r = mb.run(function()
      local h = assert(sp:spawn(spec{ graceMs = 50 }))
      local t0 = mb.now()
      local o = assert(h:wait())
      return { o = o, waited = mb.now() - t0, alive = h:waitForExit(10) }
    end)
    assert.are.same({ exitCode = 0 }, r.o)
    assert.is_true(r.waited < 100000)
    assert.is_false(r.alive)
  end)

  it("writes batch stdin then closes it", function()
    local core
    local sp, sb, log = make{
      stream = function()
        return fake_sandbox.stream{ ev{ start = { pid = 9 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 10", "!exit 0", "!empty", "!done" }) } } }
      end,
      unary = function() return {} end,
    }
    core = sb.core
    mb.run(function() assert(sp:spawn(spec{ stdio = { stdin = { data = "abc" }, stdout = "inherit", stderr = { maxBytes = 1 } } })) end)
    assert.are.equal(true, log[1].args[2].stdin)
    assert.are.equal("process.Process/SendInput", log[2].args[1])
    assert.are.same({ process = { pid = 9 }, input = { stdin = core.b64encode("abc") } }, log[2].args[2])
    assert.are.equal("process.Process/CloseStdin", log[3].args[1])
  end)

  it("pipes stdout to a reader that ends at EOF", function()
    local core
    local sp, sb = make{ stream = function()
      return fake_sandbox.stream{ ev{ start = { pid = 1 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 2", { "o", "a" }, { "o", "b" }, "!exit 0", "!empty", "!done" }) } } }
    end }
    core = sb.core
    local got = mb.run(function()
      local h = assert(sp:spawn(spec{ stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe" } }))
      local parts = {}
      while true do
        local c = h.stdout:read(1000)
        if not c then break end
        parts[#parts + 1] = c
      end
      return table.concat(parts)
    end)
    assert.are.equal("ab", got)
  end)

  it("reports a stream that dies mid-run instead of hanging", function()
    local core
    local sp, sb = make{ stream = function()
      return fake_sandbox.stream{ ev{ start = { pid = 1 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 2" }) } },
        { err = errors.new("E2B_CONNECT_FAILED", "connection reset") } }
    end }
    core = sb.core
    local r = mb.run(function()
      local h = assert(sp:spawn(spec()))
      local o, err = h:wait()
      local t0 = mb.now()
      local gone, gerr = h:waitForExit(60000)
      return { o = o, err = err, gone = gone, gerr = gerr, waited = mb.now() - t0 }
    end)
    assert.is_nil(r.o); assert.are.equal("E2B_CONNECT_FAILED", r.err.code)
    assert.is_nil(r.gone); assert.are.equal("E2B_CONNECT_FAILED", r.gerr.code)
    assert.are.equal(0, r.waited)
  end)

  it("rejects a stream that ends without !done", function()
    local core
    local sp, sb = make{ stream = function()
      return fake_sandbox.stream{ ev{ start = { pid = 1 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 2", "!exit 0" }) } } }
    end }
    core = sb.core
    local r, err = mb.run(function() local h = assert(sp:spawn(spec{ graceMs = 1000 })) return h:wait() end)
    assert.is_nil(r); assert.are.equal("E2B_PROTOCOL", err.code)
  end)

  local bad = {
    { "empty argv", { argv = {} }, "non-empty program name" },
    { "zero grace", { graceMs = 0 }, "graceMs" },
    { "huge grace", { graceMs = 2147483648 }, "graceMs" },
    { "bad stdin", { stdio = { stdin = "x", stdout = "pipe", stderr = "pipe" } }, "stdin" },
    { "bad stdout", { stdio = { stdin = "ignore", stdout = "file", stderr = "pipe" } }, "stdout" },
    { "= in env name", { env = { ["A=B"] = "1" } }, '"A=B"' },
    { "NUL in env value", { env = { A = "x\0y" } }, '"A": value contains NUL' },
  }
  for _, c in ipairs(bad) do
    it("raises before launch: " .. c[1], function()
      local sp, _, log = make{}
      local ok, err = pcall(mb.run, function() return sp:spawn(spec(c[2])) end)
      assert.is_false(ok); assert.truthy(tostring(err):find(c[3], 1, true), tostring(err))
      assert.are.equal(0, #log)
    end)
  end

  it("resolves executables with mbwrap which on the scrubbed PATH", function()
    local sp, _, log = make{ tool = function(args) return "/opt/bin/cc" end }
    local p = mb.run(function() return sp:resolveExecutable("cc", { PATH = "/opt/bin" }) end)
    assert.are.equal("/opt/bin/cc", p)
    assert.are.same({ "which", "cc", "/opt/bin" }, { table.unpack(log[1].args[1]) })
    local r, err = mb.run(function() return sp:resolveExecutable("bin/cc") end)
    assert.is_nil(r); assert.are.equal("SUBPROCESS_INVALID_ARGUMENT", err.code)
    assert.are.equal(1, #log)
  end)

  describe("terminals", function()
    local function term_sandbox(extra)
      local core
      local handlers = {
        stream = function(method, msg)
          return fake_sandbox.stream{ ev{ start = { pid = 300 } },
            ev{ data = { pty = core.b64encode("$ ") } }, { sleep = 1000 },
            ev{ ["end"] = { exitCode = -1, status = "signal: terminated" } } }
        end,
        unary = function() return {} end,
        tool = function(args)
          if args[1] == "fg" then return "300 1\n" end
          return "2\n"
        end,
      }
      for k, v in pairs(extra or {}) do handlers[k] = v end
      local sp, sb, log = make(handlers)
      core = sb.core
      return sp, sb, log
    end

    it("starts one PTY process with exactly the scrubbed environment", function()
      local sp, sb, log = term_sandbox()
      local out = mb.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/bash", "-i" }, cwd = "/w", env = { TERM = "dumb" }, rows = 40, cols = 160 })
        return { pid = t.pid, first = t.output:read(100) }
      end)
      local msg = log[1].args[2]
      assert.are.equal("/usr/bin/env", msg.process.cmd)
      -- HOME survives; SANDBOX_API_TOKEN and DSH_X are scrubbed
      assert.are.same({ "-i", "HOME=/home/user", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "TERM=dumb", "/bin/bash", "-i" },
        msg.process.args)
      assert.are.same({ size = { cols = 160, rows = 40 } }, msg.pty)
      assert.are.equal(300, out.pid); assert.are.equal("$ ", out.first)
    end)

    it("writes, resizes, inspects and signals the foreground group", function()
      local sp, sb, log = term_sandbox()
      local r = mb.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/bash" }, cwd = "/w" })
        assert(t:write("ls\r"))
        assert(t:resize(30, 100))
        local fg = assert(t:inspectForeground())
        local pg = assert(t:signalForeground("SIGINT"))
        local _, kerr = t:signalForeground("SIGKILL")
        return { fg = fg, pg = pg, kerr = kerr }
      end)
      assert.are.same({ processGroupId = 300, inputWaiting = true }, r.fg)
      assert.are.equal(300, r.pg)
      assert.are.equal("TERMINAL_REFUSED", r.kerr.code)
      assert.are.same({ process = { pid = 300 }, input = { pty = sb.core.b64encode("ls\r") } }, log[2].args[2])
      assert.are.same({ process = { pid = 300 }, pty = { size = { cols = 100, rows = 30 } } }, log[3].args[2])
      local sig = log[6].args[1]
      assert.are.same({ "signal", "300", "SIGINT" }, { table.unpack(sig) })
    end)

    it("terminates the whole session with one killsession and settles", function()
      local sp, sb, log = term_sandbox()
      local r = mb.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/bash" }, cwd = "/w", graceMs = 250 })
        assert(t:terminate()); assert(t:terminate())
        local _, werr = t:write("x")
        return { outcome = assert(t:wait()), werr = werr }
      end)
      local kills = {}
      for _, e in ipairs(log) do if e.kind == "tool" then kills[#kills + 1] = e.args[1] end end
      assert.are.same({ { "killsession", "300", "250" } }, kills)
      assert.are.same({ signal = "SIGTERM" }, r.outcome)
      assert.truthy(r.werr)
    end)
  end)
end)
