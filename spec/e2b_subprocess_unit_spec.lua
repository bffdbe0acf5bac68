-- The E2B subprocess provider against a scripted sandbox: one Start per spawn, in-band frames,
-- env policy on the host, termination and terminals.
local fake_mb = require "support.fake_mb"
local fake_sandbox = require "support.fake_sandbox"
local errors = require "moonbox.errors"

local mb, spmod
local cjson = require "cjson"

-- A scripted Process/Start stream: envd messages (Connect envelopes), { sleep = ms },
-- { err = e }, { raw = bytes }; support.fake_pstream feeds them to the real C decoder.
local function stream(items) return items end

local function make(handlers)
  local sb, owner, log = fake_sandbox.new(handlers)
  local sp = spmod.new({ e2b = owner }, { frameLineMax = 40000, pipeBufferBytes = 4096 })
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
  setup(function() mb = fake_mb.install(); spmod = require "moonbox.subprocess.e2b" end)
  teardown(function() fake_mb.uninstall() end)

  describe("collect mode (tail ring in C)", function()
    local function collect(max, spill, chunks, diag)
      local core
      local lines = { "!pgid 2" }
      for _, c in ipairs(chunks) do lines[#lines + 1] = { "o", c } end
      lines[#lines + 1] = "!exit 0"; lines[#lines + 1] = "!empty"; lines[#lines + 1] = "!done"
      local sp, sb = make{ stream = function()
        local items = { ev{ start = { pid = 1 } } }
        if diag then items[#items + 1] = ev{ data = { stderr = core.b64encode(diag) } } end
        items[#items + 1] = ev{ data = { stdout = fake_sandbox.frames(core, lines) } }
        return stream(items)
      end }
      core = sb.core
      local out = { maxBytes = max, spill = spill }
      return mb.run(function()
        local h = assert(sp:spawn(spec{ stdio = { stdin = "ignore", stdout = out, stderr = { maxBytes = 1 } } }))
        assert(h:wait())
        return h
      end)
    end
    it("keeps a bounded tail with whole-stream offsets", function()
      local c = collect(5, nil, { "abc", "defg" }).collected.stdout
      assert.are.same({ text = "cdefg", nextOffset = 7, lossy = true }, c:readFrom(0))
      assert.are.same({ text = "fg", nextOffset = 7, lossy = false }, c:readFrom(5))
      assert.are.same({ text = "", nextOffset = 7, lossy = false }, c:readFrom(7))
      assert.are.equal(7, c:total())
    end)
    it("points at the spill only when lossy and the spill is complete", function()
      local c = collect(2, { maxBytes = 5 }, { "abcd" }).collected.stdout
      assert.truthy(c:readFrom(0).spillPath:match("^/tmp/%.moonbox%-x/processes%-%x+/spill%-"))
      assert.is_nil(c:readFrom(3).spillPath)
      c = collect(2, { maxBytes = 5 }, { "abcd", "ef" }).collected.stdout
      assert.is_nil(c:readFrom(0).spillPath)   -- 6 > 5: the wrapper dropped the spill
    end)
    it("does not point at a spill mbwrap reported removed (its stderr diagnostic)", function()
      local c = collect(2, { maxBytes = 5 }, { "abcd" }, "mbwrap: stdout spill removed: No space left on device\n")
      local r = c.collected.stdout:readFrom(0)
      assert.is_true(r.lossy)
      assert.is_nil(r.spillPath)
      assert.is_false(c.collected.stdout:spillValid())
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
      return stream{
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
    -- values travel in envs, never on the command line; -K keeps exactly these names
    assert.are.same({ "run", "-g", "100", "-K", "CC_TOKEN", "-K", "LANG", "-K", "PATH",
      "--", "cc", "-o", "x", "x.c" }, msg.process.args)
    assert.are.same({ CC_TOKEN = "opt-in", LANG = "C.UTF-8", PATH = "/usr/bin:/bin" }, msg.process.envs)
    assert.are.equal(77, out.pid)
    assert.are.same({ exitCode = 3 }, out.outcome)
    assert.is_true(out.empty)
    assert.are.equal("built\n", h.collected.stdout:readFrom(0).text)
    assert.are.equal("warn\n", h.collected.stderr:readFrom(0).text)
  end)

  it("reports a real signal name", function()
    local core
    local sp, sb = make{ stream = function()
      return stream{ ev{ start = { pid = 5 } },
        ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 6", { "o", "partial" }, "!signal 11", "!empty", "!done" }) } } }
    end }
    core = sb.core
    local h, outcome = mb.run(function() local h = assert(sp:spawn(spec())) return h, h:wait() end)
    assert.are.same({ signal = "SIGSEGV" }, outcome)
    assert.are.equal("partial", h.collected.stdout:readFrom(0).text)
  end)

  -- Found by the soak: a terminate that raced the wrapper's start killed it before its first
  -- frame; the stream then ended without frames and the handle stayed tracked for good.
  it("a wrapper killed before its first frame fails the spawn and leaves nothing tracked", function()
    local sp = make{ stream = function()
      return stream{ ev{ start = { pid = 9 } }, ev{ ["end"] = { exitCode = -1, status = "signal: terminated" } } }
    end }
    local h, err = mb.run(function() return sp:spawn(spec()) end)
    assert.is_nil(h)
    assert.are.equal("SPAWN_FAILED", err.code)
    assert.truthy(err.message:find("SIGTERM", 1, true), err.message)
    assert.is_nil(next(sp.live))
  end)

  it("fails the spawn itself when the program cannot be executed", function()
    local core
    local sp, sb = make{ stream = function()
      return stream{ ev{ start = { pid = 5 } },
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
      return stream{ ev{ start = { pid = 5 } },
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
        return stream{ ev{ start = { pid = 41 } },
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
      return stream{ ev{ start = { pid = 1 } },
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

  it("sends batch stdin on the wrapper's command line: one request", function()
    local core
    local sp, sb, log = make{
      stream = function()
        return stream{ ev{ start = { pid = 9 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 10", "!exit 0", "!empty", "!done" }) } } }
      end,
    }
    core = sb.core
    mb.run(function() assert(assert(sp:spawn(spec{ stdio = { stdin = { data = "abc" }, stdout = { maxBytes = 1 }, stderr = { maxBytes = 1 } } })):wait()) end)
    assert.are.equal(1, #log)
    local msg = log[1].args[2]
    assert.are.equal(false, msg.stdin)
    local args = msg.process.args
    local i = 1
    while args[i] ~= "-i" do i = i + 1 end
    assert.are.equal(core.b64encode("abc"), args[i + 1])
  end)

  it("falls back to SendInput + CloseStdin for batch stdin too large for an argument", function()
    local core
    local big = ("x"):rep(require("moonbox.core").limits.stdin_arg_max + 1)
    local sp, sb, log = make{
      stream = function()
        return stream{ ev{ start = { pid = 9 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 10", "!exit 0", "!empty", "!done" }) } } }
      end,
      unary = function() return {} end,
    }
    core = sb.core
    mb.run(function() assert(sp:spawn(spec{ stdio = { stdin = { data = big }, stdout = { maxBytes = 1 }, stderr = { maxBytes = 1 } } })) end)
    assert.are.equal(true, log[1].args[2].stdin)
    for _, a in ipairs(log[1].args[2].process.args) do assert.are_not.equal("-i", a) end
    assert.are.equal("process.Process/SendInput", log[2].args[1])
    assert.are.same({ process = { pid = 9 }, input = { stdin = core.b64encode(big) } }, log[2].args[2])
    assert.are.equal("process.Process/CloseStdin", log[3].args[1])
  end)

  it("hands pipe output over per HTTP chunk and keeps the group id first", function()
    local core
    local sp, sb = make{ stream = function()
      local body = core.envelope(0, cjson.encode(ev{ start = { pid = 1 } }))
        .. core.envelope(0, cjson.encode(ev{ data = { stdout = fake_sandbox.frames(core,
          { "!pgid 2", { "o", "a" }, { "e", "E" }, { "o", "b" }, "!exit 0", "!empty", "!done" }) } }))
      return stream{ { raw = body:sub(1, 7) }, { raw = body:sub(8) } }
    end }
    core = sb.core
    local got = mb.run(function()
      local h = assert(sp:spawn(spec{ stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe" } }))
      local out, err = {}, {}
      while true do local c = h.stdout:read(1000) if not c then break end out[#out + 1] = c end
      while true do local c = h.stderr:read(1000) if not c then break end err[#err + 1] = c end
      local o, werr = h:wait()
      assert(o, tostring(werr))
      return { out = out, err = err, o = o, pid = h.pid }
    end)
    assert.are.same({ "ab" }, got.out)                   -- one hand-off for the chunk, not per frame
    assert.are.same({ "E" }, got.err)
    assert.are.same({ exitCode = 0 }, got.o)
    assert.are.equal(2, got.pid)
  end)

  it("fails with the Connect error of an end-of-stream error", function()
    local core
    local sp, sb = make{ stream = function()
      return stream{ ev{ start = { pid = 1 } }, ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 2" }) } },
        { raw = core.envelope(2, cjson.encode({ error = { code = "not_found", message = "process gone" } })) },
        { err = errors.new("E2B_CONNECT_FAILED", "not reached") } }
    end }
    core = sb.core
    local r, err = mb.run(function() local h = assert(sp:spawn(spec())) return h:wait() end)
    assert.is_nil(r); assert.are.equal("E2B_NOT_FOUND", err.code)
    assert.truthy(err.message:find("process gone", 1, true))
  end)

  it("pipes stdout to a reader that ends at EOF", function()
    local core
    local sp, sb = make{ stream = function()
      return stream{ ev{ start = { pid = 1 } },
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
      return stream{ ev{ start = { pid = 1 } },
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
      return stream{ ev{ start = { pid = 1 } },
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
    { "a negative spill cap", { stdio = { stdin = "ignore", stdout = { maxBytes = 10, spill = { maxBytes = -5 } },
      stderr = "pipe" } }, "stdio.stdout.spill.maxBytes must be a whole number of bytes from 0 to 2^53, got -5" },
    { "an infinite tail", { stdio = { stdin = "ignore", stdout = { maxBytes = math.huge }, stderr = "pipe" } },
      "stdio.stdout.maxBytes must be a whole number of bytes from 0 to 2^53, got inf" },
    { "a fractional tail", { stdio = { stdin = "ignore", stdout = "pipe", stderr = { maxBytes = 1.5 } } },
      "stdio.stderr.maxBytes must be a whole number" },
    { "an unknown output field", { stdio = { stdin = "ignore", stdout = { maxBytes = 1, tail = 2 }, stderr = "pipe" } },
      "stdio.stdout: unknown field tail" },
    { "an option-like env name", { env = { ["-Sx"] = "y" } }, "begins with '-'" },
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

  it("rejects an empty executable name with a coded error and no request", function()
    local sp, _, log = make{ tool = function() return "/bin/x" end }
    for _, name in ipairs({ "", 42 }) do
      local r, err = mb.run(function() return sp:resolveExecutable(name) end)
      assert.is_nil(r); assert.are.equal("SUBPROCESS_INVALID_ARGUMENT", err.code)
      assert.is_true(errors.is(err))
    end
    assert.are.equal(0, #log)
  end)

  local bad_terminals = {
    { "empty argv", { argv = {} }, "spawnTerminal: argv must be a list whose argv[1] is a non-empty program name" },
    { "zero grace", { argv = { "/bin/sh" }, graceMs = 0 }, "spawnTerminal: graceMs" },
  }
  for _, c in ipairs(bad_terminals) do
    it("spawnTerminal raises before launch: " .. c[1], function()
      local sp, _, log = make{}
      local ok, err = pcall(mb.run, function() return sp:spawnTerminal(c[2]) end)
      assert.is_false(ok); assert.truthy(tostring(err):find(c[3], 1, true), tostring(err))
      assert.are.equal(0, #log)
    end)
  end

  it("refuses spawn and spawnTerminal after dispose()", function()
    local sp, _, log = make{}
    local r = mb.run(function()
      assert(sp:dispose())
      local ok1, e1 = pcall(sp.spawn, sp, spec())
      local ok2, e2 = pcall(sp.spawnTerminal, sp, { argv = { "/bin/sh" }, cwd = "/w" })
      return { ok1, e1, ok2, e2 }
    end)
    assert.is_false(r[1]); assert.truthy(tostring(r[2]):find("disposing", 1, true), tostring(r[2]))
    assert.is_false(r[3]); assert.truthy(tostring(r[4]):find("disposing", 1, true), tostring(r[4]))
    assert.are.equal(0, #log)
  end)

  describe("terminals", function()
    local function term_sandbox(extra)
      local core
      local handlers = {
        stream = function(method, msg)
          return stream{ ev{ start = { pid = 300 } },
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
      -- mbwrap exec keeps exactly the names given with -K; the values travel in envs, never on
      -- a command line. HOME survives; SANDBOX_API_TOKEN and DSH_X are scrubbed.
      assert.are.equal(sb.wrapper, msg.process.cmd)
      assert.are.same({ "exec", "-K", "HOME", "-K", "LANG", "-K", "PATH", "-K", "TERM", "--", "/bin/bash", "-i" },
        msg.process.args)
      assert.are.same({ HOME = "/home/user", LANG = "C.UTF-8", PATH = "/usr/bin:/bin", TERM = "dumb" }, msg.process.envs)
      assert.are.same({ size = { cols = 160, rows = 40 } }, msg.pty)
      assert.are.equal(300, out.pid); assert.are.equal("$ ", out.first)
    end)

    it("decodes PTY output in C: exact bytes in order, several events per chunk, end after the output", function()
      local core
      local sp, sb = make{
        stream = function()
          local function env(t) return core.envelope(0, cjson.encode(t)) end
          return stream{ ev{ start = { pid = 300 } },
            { raw = env(ev{ data = { pty = core.b64encode("h\xc3") } })
                 .. env(ev{ data = { pty = core.b64encode("\xa9llo \xe2\x9c") } })
                 .. env(ev{ keepalive = {} }) },
            { raw = env(ev{ data = { pty = core.b64encode("\x93\r\n!exit 3\r\n") } })
                 .. env(ev{ ["end"] = { exitCode = 0, exited = true, status = "exit status 0" } }) } }
        end,
      }
      core = sb.core
      local r = mb.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/sh" }, cwd = "/w" })
        local parts = {}
        while true do
          local c, err = t:read(1000)
          if c == nil then assert(err == nil, tostring(err)) break end
          parts[#parts + 1] = c
        end
        return { out = table.concat(parts), outcome = assert(t:wait()), n = #parts }
      end)
      assert.are.equal("h\xc3\xa9llo \xe2\x9c\x93\r\n!exit 3\r\n", r.out)
      assert.is_true(r.n >= 1)                           -- handed over as it is queued, not per event
      assert.are.same({ exitCode = 0 }, r.outcome)
    end)

    it("a terminal stream ending in a Connect error reports it after the queued output", function()
      local core
      local sp, sb = make{
        stream = function()
          return stream{ ev{ start = { pid = 300 } }, ev{ data = { pty = core.b64encode("bye") } },
            { raw = core.envelope(2, cjson.encode{ error = { code = "unavailable", message = "gone" } }) } }
        end,
      }
      core = sb.core
      local r = mb.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/sh" }, cwd = "/w" })
        local first = t:read(1000)
        local eof, rerr = t:read(1000)
        local _, werr = t:wait()
        return { first = first, eof = eof, rerr = rerr, werr = werr }
      end)
      assert.are.equal("bye", r.first)
      assert.is_nil(r.eof)
      assert.are.equal("E2B_UNAVAILABLE", r.rerr.code)
      assert.are.equal("E2B_UNAVAILABLE", r.werr.code)
    end)

    it("a terminal stream ending without an end event is a protocol error", function()
      local core
      local sp, sb = make{
        stream = function()
          return stream{ ev{ start = { pid = 300 } }, ev{ data = { pty = core.b64encode("x") } } }
        end,
      }
      core = sb.core
      local r = mb.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/sh" }, cwd = "/w" })
        local o, werr = t:wait()
        return { o = o, werr = werr, out = t:read(0) }
      end)
      assert.is_nil(r.o)
      assert.are.equal("E2B_PROTOCOL", r.werr.code)
      assert.are.equal("x", r.out)
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
  describe("review regressions", function()
    -- A stream of `n` one-frame data chunks of 1000 bytes after the group id (enough to fill
    -- the 4096-byte pipe buffer of these specs), then `tail` frames.
    local function flood(core, n, tail, kind)
      local items = { ev{ start = { pid = 41 } }, ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 77" }) } } }
      local chunk = ("y"):rep(999) .. "\n"
      for i = 1, n do items[#items + 1] = ev{ data = { stdout = fake_sandbox.frames(core, { { kind or "o", chunk } }) } } end
      items[#items + 1] = ev{ data = { stdout = fake_sandbox.frames(core, tail) } }
      return items
    end

    it("terminate, done and dispose do not wait for a pipe nobody reads (item 1)", function()
      local core
      local sp, sb, log = make{
        stream = function() return stream(flood(core, 20, { "!signal 15", "!empty", "!done" })) end,
        unary = function() return {} end,
      }
      core = sb.core
      local r = mb.run(function()
        local h = assert(sp:spawn(spec{ stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe" } }))
        mb.sleep(10)                                     -- the reader is now blocked on the full pipe
        assert(h:terminate())
        local o, err = h:wait(5000)
        local gone = h:waitForExit(5000)
        return { o = o, err = err, gone = gone, eof = { h.stdout:read(0) }, live = next(sp.live) ~= nil,
          disposed = { sp:dispose() } }
      end)
      assert.are.same({ signal = "SIGTERM" }, r.o, tostring(r.err))
      assert.is_true(r.gone)
      assert.are.same({}, r.eof)                         -- unread output was dropped: EOF
      assert.is_false(r.live)
      assert.are.same({ true }, r.disposed)
      assert.are.equal("process.Process/SendSignal", log[2].args[1])
    end)

    it("drops pipe output after the exit and the drain grace so the tree's end is observed (item 1)", function()
      local core
      local sp, sb = make{ stream = function()
        local items = { ev{ start = { pid = 1 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 2", { "o", "last\n" }, "!exit 0" }) } } }
        local chunk = ("d"):rep(999) .. "\n"
        for i = 1, 20 do items[#items + 1] = ev{ data = { stdout = fake_sandbox.frames(core, { { "o", chunk } }) } } end
        items[#items + 1] = ev{ data = { stdout = fake_sandbox.frames(core, { "!empty", "!done" }) } }
        return stream(items)
      end }
      core = sb.core
      local r = mb.run(function()
        local h = assert(sp:spawn(spec{ graceMs = 50, stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe" } }))
        local o = assert(h:wait(5000))
        local gone = h:waitForExit(5000)
        local got = {}
        while true do local c = h.stdout:read(0) if not c then break end got[#got + 1] = c end
        return { o = o, gone = gone, got = table.concat(got) }
      end)
      assert.are.same({ exitCode = 0 }, r.o)
      assert.is_true(r.gone)
      assert.are.equal("last\n", r.got:sub(1, 5))       -- what was queued stays readable
      assert.is_true(#r.got >= 4096 and #r.got < 5 + 20 * 1000, #r.got) -- about the buffer; the rest dropped
    end)

    it("terminal terminate does not wait for unread output and reports the observed exit (item 2)", function()
      local core
      local sp, sb = make{
        stream = function()
          local items = { ev{ start = { pid = 300 } } }
          for i = 1, 20 do items[#items + 1] = ev{ data = { pty = core.b64encode("y\n") } } end
          items[#items + 1] = ev{ ["end"] = { exitCode = -1, status = "signal: hangup" } }
          return stream(items)
        end,
        tool = function() return "1\n" end,
      }
      core = sb.core
      local r = mb.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/usr/bin/yes" }, cwd = "/w", graceMs = 100 })
        mb.sleep(10)
        local ok, err = t:terminate()
        local o, werr = t:wait(5000)
        return { ok = ok, err = err, o = o, werr = werr }
      end)
      assert.is_true(r.ok, tostring(r.err))
      assert.are.same({ signal = "SIGHUP" }, r.o, tostring(r.werr))
    end)

    it("terminal terminate fails when the top-level exit is not observed (item 2)", function()
      local core
      local sp, sb = make{
        stream = function() return stream{ ev{ start = { pid = 300 } }, { sleep = 10000000 },
          ev{ ["end"] = { exitCode = 0, status = "exit status 0" } } } end,
        tool = function() return "1\n" end,
      }
      core = sb.core
      local r = mb.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/sh" }, cwd = "/w", graceMs = 100 })
        local ok, err = t:terminate()
        return { ok = ok, err = err }
      end)
      assert.is_nil(r.ok)
      assert.are.equal("TERMINAL_TEARDOWN", r.err.code)
    end)

    it("spills live in the swept process directory; mbwrap drops those the tail holds (item 8)", function()
      local core
      local sp, sb, log = make{
        stream = function() return stream{ ev{ start = { pid = 1 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 2", "!exit 0", "!empty", "!done" }) } } } end,
        unary = function() return {} end,
      }
      core = sb.core
      local r = mb.run(function()
        local h = assert(sp:spawn(spec{ stdio = { stdin = "ignore", stdout = { maxBytes = 100, spill = { maxBytes = 1000 } },
          stderr = { maxBytes = 7, spill = { maxBytes = 9 } } } }))
        assert(h:wait())
        local n_before = #log
        assert(sp:dispose())
        return { n_before = n_before }
      end)
      assert.are.equal(1, r.n_before)                    -- still one request per spawn
      local args = log[1].args[2].process.args
      local o, k = {}, {}
      for i = 1, #args - 1 do
        if args[i] == "-o" or args[i] == "-e" then o[#o + 1] = args[i + 1] end
        if args[i] == "-k" then k[#k + 1] = args[i + 1] end
      end
      local dir = "/tmp/.moonbox-x/processes-" .. sp.id
      assert.are.equal(dir .. "/", o[1]:sub(1, #dir + 1))
      assert.truthy(o[1]:match("/spill%-[^/]*%.stdout%.log:1000$"))
      assert.truthy(o[2]:match("/spill%-[^/]*%.stderr%.log:9$") and o[2]:sub(1, #dir + 1) == dir .. "/")
      assert.are.same({ "o:100", "e:7" }, k)
      assert.are.equal(2, #log)                          -- dispose: one Remove of the directory
      assert.are.same({ "filesystem.Filesystem/Remove", { path = "/tmp/.moonbox-x/processes-" .. sp.id } },
        { log[2].args[1], log[2].args[2] })
    end)

    it("a cancel token starts terminate; a fired token refuses the spawn (item 9)", function()
      local core
      local sp, sb, log = make{
        stream = function() return stream{ ev{ start = { pid = 41 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 77" }) } }, { sleep = 1000 },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!signal 15", "!empty", "!done" }) } } } end,
        unary = function() return {} end,
      }
      core = sb.core
      local r = mb.run(function()
        local cancel = mb.event()
        local h = assert(sp:spawn(spec{ cancel = cancel }))
        mb.sleep(10)
        cancel:set()
        local o = assert(h:wait())
        local fired = mb.event(); fired:set()
        local h2, err = sp:spawn(spec{ cancel = fired })
        return { o = o, h2 = h2, err = err }
      end)
      assert.are.equal("process.Process/SendSignal", log[2].args[1])
      assert.are.same({ process = { pid = 41 }, signal = "SIGNAL_SIGTERM" }, log[2].args[2])
      assert.are.same({ signal = "SIGTERM" }, r.o)
      assert.is_nil(r.h2); assert.are.equal("SUBPROCESS_CANCELED", r.err.code)
      assert.are.equal(2, #log)                          -- the refused spawn sent nothing
      assert.has_error(function() mb.run(function() sp:spawn(spec{ cancel = "now" }) end) end)
    end)

    it("a cancel token abandons a terminal allocation and kills a PTY that starts late (item 9)", function()
      local core
      local sp, sb, log = make{
        stream = function() return stream{ { sleep = 1000 }, ev{ start = { pid = 300 } }, { sleep = 10000000 } } end,
        tool = function() return "1\n" end,
      }
      core = sb.core
      local r = mb.run(function()
        local cancel = mb.event()
        mb.spawn(function() mb.sleep(10) cancel:set() end)
        local t0 = mb.now()
        local t, err = sp:spawnTerminal{ argv = { "/bin/sh" }, cwd = "/w", graceMs = 100, cancel = cancel }
        local waited = mb.now() - t0
        mb.sleep(2000)                                   -- the late start is cleaned up meanwhile
        return { t = t, err = err, waited = waited }
      end)
      assert.is_nil(r.t); assert.are.equal("SUBPROCESS_CANCELED", r.err.code)
      assert.is_true(r.waited < 1000)                    -- virtual clock: returned before the start
      local kills = {}
      for _, e in ipairs(log) do if e.kind == "tool" then kills[#kills + 1] = e.args[1] end end
      assert.are.same({ { "killsession", "300", "100" } }, kills)
    end)

    it("keeps a process whose stream broke tracked; dispose kills it by its ids (item 11)", function()
      local core
      local sp, sb, log = make{
        stream = function() return stream{ ev{ start = { pid = 41 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 77" }) } },
          { err = errors.new("E2B_CONNECT_FAILED", "connection reset") } } end,
        unary = function() return {} end,
        tool = function() return "1\n" end,
      }
      core = sb.core
      local r = mb.run(function()
        local h = assert(sp:spawn(spec{ graceMs = 250 }))
        local _, err = h:wait()
        local tracked = sp.live[h] == true
        local ok, derr = sp:dispose()
        return { err = err, tracked = tracked, ok = ok, derr = derr, gone = h:waitForExit(0) }
      end)
      assert.are.equal("E2B_CONNECT_FAILED", r.err.code)
      assert.is_true(r.tracked)
      assert.is_true(r.ok, tostring(r.derr))
      assert.is_true(r.gone)
      assert.are.same({ "process.Process/SendSignal", { process = { pid = 41 }, signal = "SIGNAL_SIGTERM" } },
        { log[2].args[1], log[2].args[2] })
      assert.are.same({ "killsession", "77", "250" }, { table.unpack(log[3].args[1]) })
    end)

    it("treats a deleted sandbox as the end of a broken process at dispose (item 11)", function()
      local core
      local sp, sb, log = make{
        stream = function() return stream{ ev{ start = { pid = 41 } },
          ev{ data = { stdout = fake_sandbox.frames(core, { "!pgid 77" }) } },
          { err = errors.new("E2B_IO", "transfer closed") } } end,
        unary = function() return nil, errors.new("E2B_UNAVAILABLE", "process.Process/SendSignal: [unavailable] The sandbox was not found") end,
      }
      core = sb.core
      local ok = mb.run(function()
        local h = assert(sp:spawn(spec()))
        h:wait()
        return sp:dispose()
      end)
      assert.is_true(ok)
      assert.are.equal(2, #log)                          -- Start, SendSignal; no killsession
    end)

    it("maps a missing cwd to a spawn failure naming it (item 11)", function()
      local sp = make{ stream = function()
        return nil, errors.new("E2B_INVALID_ARGUMENT", "process.Process/Start: [invalid_argument] cwd '/nope' does not exist")
      end }
      local h, err = mb.run(function() return sp:spawn(spec{ cwd = "/nope" }) end)
      assert.is_nil(h); assert.are.equal("SPAWN_FAILED", err.code)
      assert.truthy(err.message:find('"/nope"', 1, true))
      assert.are.equal("E2B_INVALID_ARGUMENT", err.cause.code)
    end)
  end)
end)
