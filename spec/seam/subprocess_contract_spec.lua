-- Subprocess seam contract (reference §2, §4.2, §6.3–6.6 without their defects, §8 regressions).
local P = require "seam.provider"

local function spec(argv, over)
  local s = { argv = argv, cwd = P.open().cwd, graceMs = 500,
    stdio = { stdin = "ignore", stdout = { maxBytes = 65536 }, stderr = { maxBytes = 65536 } } }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

local survivors, named = P.survivors, P.named

describe("subprocess seam contract #sandboxd", function()
  local sp, mb
  setup(function() sp = P.open().ctx.subprocess; mb = require "moonbox" end)
  teardown(function() P.close() end)

  it("runs argv without a shell and reports the exit code and output", function()
    P.run(function()
      local h = assert(sp:spawn(spec({ "printf", "%s|", "$HOME;ls", "a b" })))
      assert.is_true(h.pid > 1)                       -- real at return (regression: pid -1)
      assert.are.same({ exitCode = 0 }, assert(h:wait(10000)))
      assert.are.equal("$HOME;ls|a b|", h.collected.stdout:readFrom(0).text)
      local h2 = assert(sp:spawn(spec({ "/bin/sh", "-c", "echo err >&2; exit 7" })))
      assert.are.same({ exitCode = 7 }, assert(h2:wait(10000)))
      assert.are.equal("err\n", h2.collected.stderr:readFrom(0).text)
    end)
  end)

  it("costs one request per spawn", function()
    if P.open().name ~= "e2b" then return pending("requests are the E2B providers' cost") end
    P.run(function()
      local n = P.requests(function()
        local h = assert(sp:spawn(spec({ "true" })))
        assert(h:wait(10000))
      end)
      assert.are.equal(1, n)
    end)
  end)

  it("fails the spawn for a missing executable (regression: exit 127)", function()
    P.run(function()
      local h, err = sp:spawn(spec({ "/no/such/program" }))
      if h then h, err = h:wait(10000) end
      assert.is_nil(h); assert.are.equal("SPAWN_FAILED", err.code)
    end)
  end)

  it("reports a real signal and keeps the output of a signalled program (regression)", function()
    P.run(function()
      local h = assert(sp:spawn(spec({ "/bin/sh", "-c", "echo before; kill -TERM $$" })))
      assert.are.same({ signal = "SIGTERM" }, assert(h:wait(10000)))
      assert.are.equal("before\n", h.collected.stdout:readFrom(0).text)
      local k = assert(sp:spawn(spec({ "/bin/sh", "-c", "kill -KILL $$" })))
      assert.are.same({ signal = "SIGKILL" }, assert(k:wait(10000)))
    end)
  end)

  it("terminates a TERM-ignoring tree: SIGKILL only once it is dead, nothing survives", function()
    P.run(function()
      local marker = "mbterm" .. os.time()
      local bin = named("sleep", marker)
      local h = assert(sp:spawn(spec({ "/bin/sh", "-c",
        "trap '' TERM; (trap '' TERM; exec " .. bin .. " 300) & setsid " .. bin .. " 301 & exec " .. bin .. " 302" },
        { graceMs = 300 })))
      while #survivors(marker) < 3 do mb.sleep(50) end  -- all three run (the leader ignores TERM)
      assert(h:terminate())
      local o = assert(h:wait(10000))
      assert.are.same({ signal = "SIGKILL" }, o)
      assert.is_true(h:waitForExit(10000))
      assert.are.same({}, survivors(marker))
    end)
  end)

  it("waitForExit covers double-forked descendants after the leader exits", function()
    P.run(function()
      local marker = "mbdfork" .. os.time()
      local bin = named("sleep", marker)
      local h = assert(sp:spawn(spec({ "/bin/sh", "-c", "(setsid " .. bin .. " 0.5 &) ; exit 0" },
        { graceMs = 100 })))
      assert.are.same({ exitCode = 0 }, assert(h:wait(10000)))
      assert.is_true(h:waitForExit(10000))
      assert.are.same({}, survivors(marker))
    end)
  end)

  it("passes stdin data and pipes", function()
    P.run(function()
      local h = assert(sp:spawn(spec({ "cat" }, { stdio = { stdin = { data = "hello\n" }, stdout = { maxBytes = 100 }, stderr = "pipe" } })))
      assert(h:wait(10000)); assert.are.equal("hello\n", h.collected.stdout:readFrom(0).text)
      local p = assert(sp:spawn(spec({ "cat" }, { stdio = { stdin = "pipe", stdout = "pipe", stderr = { maxBytes = 10 } } })))
      assert(p.stdin:write("ab")); assert(p.stdin:write("cd")); assert(p.stdin:close())
      local got = {}
      while true do
        local c = p.stdout:read(10000)
        if not c then break end
        got[#got + 1] = c
      end
      assert.are.equal("abcd", table.concat(got))
      assert.are.same({ exitCode = 0 }, assert(p:wait(10000)))
    end)
  end)

  it("keeps a bounded tail and a spill file for collect mode", function()
    P.run(function()
      local h = assert(sp:spawn(spec({ "/bin/sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done" },
        { stdio = { stdin = "ignore", stdout = { maxBytes = 100, spill = { maxBytes = 1 << 20 } }, stderr = { maxBytes = 10 } } })))
      assert(h:wait(10000))
      local r = h.collected.stdout:readFrom(0)
      assert.is_true(r.lossy); assert.are.equal(100, #r.text)
      assert.truthy(r.text:find("line%-1999\n$"))
      assert.is_string(r.spillPath)
      local full = P.sh("cat '" .. r.spillPath .. "'")
      assert.are.equal(r.nextOffset, #full)
      assert.truthy(full:find("^line%-0\n"))
    end)
  end)

  it("scrubs the environment on the host and honours explicit entries and tombstones", function()
    P.run(function()
      local h = assert(sp:spawn(spec({ "env" }, { env = { EXPLICIT_TOKEN = "yes", DSH_SESSION_ID = "1", HOME = false } })))
      assert(h:wait(10000))
      local out = h.collected.stdout:readFrom(0).text
      assert.truthy(out:find("EXPLICIT_TOKEN=yes", 1, true)); assert.truthy(out:find("DSH_SESSION_ID=1", 1, true))
      assert.is_nil(out:find("\nHOME=", 1, true)); assert.is_nil(out:find("^HOME="))
      assert.truthy(out:find("PATH=", 1, true))
      assert.has_error(function() sp:spawn(spec({ "env" }, { env = { ["A=B"] = "x" } })) end)
    end)
  end)

  it("never puts the API key into the sandbox", function()
    if P.open().name ~= "e2b" then return pending("an E2B API key is the E2B providers' secret") end
    P.run(function()
      local key = P.open().api_key
      assert.is_string(key)
      local out = P.sh("cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'")
      assert.is_nil(out:find(key, 1, true))
    end)
  end)

  it("validates before launching", function()
    P.run(function()
      assert.has_error(function() sp:spawn(spec({ "" })) end)
      assert.has_error(function() sp:spawn(spec({ "true" }, { graceMs = 0 })) end)
      assert.has_error(function() sp:spawn(spec({ "true" }, { graceMs = 2147483648 })) end)
    end)
  end)

  it("refuses unknown fields, naming them and the nearest valid one, at the caller's line", function()
    P.run(function()
      local function raised(fn)
        local ok, err = pcall(fn)
        assert.is_false(ok)
        return err
      end
      local line = debug.getinfo(1, "l").currentline
      local e1 = raised(function() sp:spawn(spec({ "true" }, { timeoutMs = 300 })) end)
      assert.truthy(e1:find("subprocess_contract_spec.lua:" .. (line + 1) .. ": spawn: unknown field timeoutMs (expected argv, cwd, stdio, env, graceMs, cancel, detached)", 1, true), e1)
      local e2 = raised(function() sp:spawn(spec({ "true" }, { gracems = 300 })) end)
      assert.truthy(e2:find("unknown field gracems", 1, true) and e2:find("the nearest is graceMs", 1, true), e2)
      local e3 = raised(function()
        sp:spawn(spec({ "true" }, { stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe", sdterr = "pipe" } }))
      end)
      assert.truthy(e3:find("spawn: stdio: unknown field sdterr", 1, true) and e3:find("the nearest is stderr", 1, true), e3)
      local s0 = spec({ "true" }); s0.graceMs = nil
      line = debug.getinfo(1, "l").currentline
      local e0 = raised(function() sp:spawn(s0) end)
      assert.truthy(e0:find("subprocess_contract_spec.lua:" .. (line + 1) .. ": spawn: graceMs is required", 1, true), e0)
      local e5 = raised(function() sp:spawn(spec({ "true" }, { graceMs = -1 })) end)
      assert.truthy(e5:find("subprocess_contract_spec.lua:%d+: spawn: graceMs must be a positive finite number"), e5)
      local e4 = raised(function() sp:spawnTerminal{ argv = { "true" }, row = 10 } end)
      assert.truthy(e4:find("spawnTerminal: unknown field row", 1, true) and e4:find("the nearest is rows", 1, true), e4)
    end)
  end)

  it("resolves executables", function()
    P.run(function()
      assert.truthy(assert(sp:resolveExecutable("sh")):match("^/.*/sh$"))
      assert.are.equal("/bin/sh", sp:resolveExecutable("/bin/sh"))
      assert.are.equal("SUBPROCESS_INVALID_ARGUMENT", select(2, sp:resolveExecutable("bin/sh")).code)
      assert.are.equal("SUBPROCESS_NOT_FOUND", select(2, sp:resolveExecutable("no-such-tool-xyz")).code)
      assert.are.equal(0, select(2, P.sh("printf x > notexec && chmod 644 notexec")))
      assert.are.equal("SUBPROCESS_NOT_FOUND", select(2, sp:resolveExecutable(P.open().cwd .. "/notexec")).code)
    end)
  end)

  it("terminates a process whose pipe output is never read (regression: terminate/done hung)", function()
    P.run(function()
      local h = assert(sp:spawn(spec({ "yes" }, { stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe" } })))
      mb.sleep(300)                                     -- let it fill every buffer up to the host pipe
      assert(h:terminate())
      assert.are.same({ signal = "SIGTERM" }, assert(h:wait(30000)))
      assert.is_true(h:waitForExit(30000))
      assert.is_nil(h.stdout:read(0))                   -- unread output was dropped: EOF
    end)
  end)

  it("starts terminate when the cancel token fires", function()
    P.run(function()
      local cancel = mb.event()
      local h = assert(sp:spawn(spec({ "sleep", "300" }, { cancel = cancel })))
      cancel:set()
      assert.are.same({ signal = "SIGTERM" }, assert(h:wait(30000)))
      assert.is_true(h:waitForExit(30000))
      local fired = mb.event(); fired:set()
      local h2, err = sp:spawn(spec({ "true" }, { cancel = fired }))
      assert.is_nil(h2); assert.are.equal("SUBPROCESS_CANCELED", err.code)
    end)
  end)

  it("stops the commands of a task that is canceled or fails, unless started detached", function()
    P.run(function()
      -- canceled while it waits on its command: the command is terminated
      local h1
      local t1 = mb.spawn(function()
        h1 = assert(sp:spawn(spec({ "sleep", "300" })))
        return h1:wait()
      end)
      while not h1 do mb.sleep(5) end
      t1:cancel()
      local ok, r, err = t1:join(30000)
      assert.is_true(ok); assert.is_nil(r); assert.are.equal("MB_CANCELED", err.code)
      assert.are.same({ signal = "SIGTERM" }, assert(h1:wait(30000)))
      assert.is_true(h1:waitForExit(30000))
      -- raised after starting it, and returned nil, err: both terminated
      local h2, h3
      local t2 = mb.spawn(function() h2 = assert(sp:spawn(spec({ "sleep", "300" }))); error("the task's own bug") end)
      local t3 = mb.spawn(function()
        h3 = assert(sp:spawn(spec({ "sleep", "300" })))
        return nil, require("moonbox.errors").new("MB_IO", "the task gave up")
      end)
      assert.is_nil((t2:join(30000))); assert.is_true((t3:join(30000)))
      assert.are.same({ signal = "SIGTERM" }, assert(h2:wait(30000)))
      assert.are.same({ signal = "SIGTERM" }, assert(h3:wait(30000)))
      assert.is_true(h2:waitForExit(30000)); assert.is_true(h3:waitForExit(30000))
      -- a task that ended well leaves its command running; so does a canceled one's detached command
      local h4, h5
      local t4 = mb.spawn(function() h4 = assert(sp:spawn(spec({ "sleep", "300" }))); return true end)
      local t5 = mb.spawn(function()
        h5 = assert(sp:spawn(spec({ "sleep", "300" }, { detached = true })))
        return h5:wait()
      end)
      assert(t4:join(30000))
      while not h5 do mb.sleep(5) end
      t5:cancel()
      assert(t5:join(30000))
      local o4, e4 = h4:wait(300)
      local o5, e5 = h5:wait(300)
      assert.is_nil(o4); assert.are.equal("MB_TIMEOUT", e4.code)
      assert.is_nil(o5); assert.are.equal("MB_TIMEOUT", e5.code)
      for _, h in ipairs({ h4, h5 }) do
        assert(h:terminate())
        assert.are.same({ signal = "SIGTERM" }, assert(h:wait(30000)))
      end
      assert.has_error(function() sp:spawn(spec({ "true" }, { detached = "yes" })) end, "spawn: detached must be a boolean")
    end, 120000)
  end)

  it("stops the terminal of a task that is canceled, unless started detached", function()
    P.run(function()
      local t1, tt
      t1 = mb.spawn(function()
        tt = assert(sp:spawnTerminal{ argv = { "sleep", "300" }, graceMs = 500 })
        return mb.sleep(300000)
      end)
      while not tt do mb.sleep(5) end
      t1:cancel()
      assert(t1:join(30000))
      assert.truthy(assert(tt:wait(30000)).signal)
      assert(tt:terminate())   -- idempotent: returns once the stop that the cancel started has finished
      local t2, td
      t2 = mb.spawn(function()
        td = assert(sp:spawnTerminal{ argv = { "sleep", "300" }, graceMs = 500, detached = true })
        return mb.sleep(300000)
      end)
      while not td do mb.sleep(5) end
      t2:cancel()
      assert(t2:join(30000))
      local done, err = td:wait(300)
      assert.is_nil(done); assert.are.equal("MB_TIMEOUT", err.code)
      assert(td:terminate())
    end, 120000)
  end)

  it("fails the spawn for a missing cwd, naming it", function()
    P.run(function()
      local h, err = sp:spawn(spec({ "true" }, { cwd = "/no/such/cwd-xyz" }))
      assert.is_nil(h); assert.are.equal("SPAWN_FAILED", err.code)
      assert.truthy(err.message:find("/no/such/cwd-xyz", 1, true), err.message)
    end)
  end)

  describe("terminal", function()
    it("drives an interactive shell, inspects and signals the foreground, terminates the session", function()
      P.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/sh", "-i" }, cwd = P.open().cwd, env = { PS1 = "$ ", TERM = "dumb" },
          rows = 24, cols = 80, graceMs = 300 })
        assert(t:write("echo hi-$((40+2))\n"))
        local out = ""
        while not out:find("hi%-42") do out = out .. assert(t.output:read(10000)) end
        local fg = assert(t:inspectForeground())
        assert.are.equal(t.pid, fg.processGroupId)
        assert.are.equal("TERMINAL_REFUSED", select(2, t:signalForeground("SIGKILL")).code)
        local marker = "mbtty" .. os.time()
        local bin = named("sleep", marker)
        assert(t:write(bin .. " 300 &\nsleep 200\n"))
        local fg2   -- the shell hands the terminal to sleep when it gets there: poll, never a fixed wait
        for _ = 1, 200 do
          fg2 = assert(t:inspectForeground())
          if fg2.processGroupId ~= t.pid then break end
          mb.sleep(50)
        end
        assert.are_not.equal(t.pid, fg2.processGroupId)
        assert.are.equal(fg2.processGroupId, t:signalForeground("SIGINT"))
        assert(t:resize(30, 100))
        assert(t:terminate())
        assert.is_table(assert(t:wait(5000)))
        assert.are.same({}, survivors(marker))
        assert.is_not_nil(select(2, t:write("x")))
      end)
    end)

    it("terminates a terminal whose output is never read and observes its exit (regression)", function()
      P.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "yes" }, cwd = P.open().cwd, rows = 24, cols = 80, graceMs = 300 })
        mb.sleep(100)
        assert(t:terminate())
        assert.is_table(assert(t:wait(0)))               -- quiescence includes the observed exit
      end)
    end)

    it("resize reaches the terminal: stty size reports the new rows and columns", function()
      P.run(function()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/sh", "-i" }, cwd = P.open().cwd, env = { PS1 = "$ ", TERM = "dumb" },
          rows = 24, cols = 80, graceMs = 300 })
        assert(t:resize(30, 100))
        -- the marker is computed by the shell, so the echoed command line never matches it
        assert(t:write("stty size; echo \"size-$((40+2))-done\"\n"))
        local out = ""
        while not out:find("size%-42%-done") do out = out .. assert(t.output:read(10000)) end
        assert.truthy(out:find("%f[%d]30 100\r?\n"), out)
        assert(t:terminate())
      end)
    end)

    it("cancels a terminal allocation", function()
      P.run(function()
        local fired = mb.event(); fired:set()
        local t, err = sp:spawnTerminal{ argv = { "/bin/sh" }, cwd = P.open().cwd, graceMs = 300, cancel = fired }
        assert.is_nil(t); assert.are.equal("SUBPROCESS_CANCELED", err.code)
      end)
    end)
  end)

  describe("E2B provider #e2b", function()
    local spmod = require "moonbox.subprocess.e2b"
    local function exists(path) return P.sh("[ -e '" .. path .. "' ] && echo yes || echo no") == "yes\n" end

    it("keeps only the spills that are needed and sweeps them at disposal (regression: never swept)", function()
      if P.open().name ~= "e2b" then return end
      P.run(function()
        local s = P.open()
        local sp2 = spmod.new(s.ctx, { frameLineMax = 40000, pipeBufferBytes = 262144 })
        local small = assert(sp2:spawn(spec({ "echo", "hi" }, { stdio = { stdin = "ignore",
          stdout = { maxBytes = 100, spill = { maxBytes = 1000 } }, stderr = { maxBytes = 100, spill = { maxBytes = 1000 } } } })))
        local big = assert(sp2:spawn(spec({ "/bin/sh", "-c", "i=0; while [ $i -lt 200 ]; do echo line-$i; i=$((i+1)); done" },
          { stdio = { stdin = "ignore", stdout = { maxBytes = 100, spill = { maxBytes = 1 << 20 } }, stderr = { maxBytes = 10 } } })))
        assert(small:wait(30000)); assert(big:wait(30000))
        assert.is_false(exists(small.collected.stdout.spill.path))   -- within the tail: removed by mbwrap
        assert.is_false(exists(small.collected.stderr.spill.path))   -- empty: removed too
        local r = big.collected.stdout:readFrom(0)
        assert.is_true(r.lossy); assert.is_true(exists(r.spillPath))
        local dir = spmod.spill_dir(s.sandbox, sp2.id)
        assert(sp2:dispose())
        assert.is_false(exists(dir))
      end)
    end)

    it("gives a terminal its environment without any command line showing it, and refuses option-like names", function()
      if P.open().name ~= "e2b" then return end
      P.run(function()
        local canary = "mb-canary-" .. os.time()
        local t = assert(sp:spawnTerminal{ argv = { "/bin/sh" }, cwd = P.open().cwd, graceMs = 300,
          env = { MB_TERMINAL_CANARY = canary, PS1 = "$ " } })
        -- every process's command line in the sandbox, while the terminal runs
        local cmdlines = P.sh("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")
        assert.is_nil(cmdlines:find(canary, 1, true))
        -- the answer is read before the shell is asked to exit: output a PTY holds when its last
        -- process exits is not something this check is about
        assert(t:write("echo \"got:$MB_TERMINAL_CANARY\"\n"))
        local out, rerr = {}, nil
        repeat
          local c, e = t:read(10000)
          if not c then rerr = e break end
          out[#out + 1] = c
        until table.concat(out):find("got:" .. canary, 1, true)
        assert.truthy(table.concat(out):find("got:" .. canary, 1, true),
          ("output %q, read ended with %s"):format(table.concat(out), tostring(rerr)))
        assert(t:write("exit\n"))
        while t:read(10000) do end
        assert(t:wait(10000))
        local ok, err = pcall(sp.spawnTerminal, sp, { argv = { "/bin/true" }, env = { ["-Sx"] = "y /bin/touch /tmp/INJECTED" } })
        assert.is_false(ok)
        assert.truthy(tostring(err):find("begins with '-'", 1, true), tostring(err))
        assert.are.equal("no\n", P.sh("[ -e /tmp/INJECTED ] && echo yes || echo no"))
      end)
    end)

    it("disposes a service whose process output is never read", function()
      if P.open().name ~= "e2b" then return end
      P.run(function()
        local marker = "mbunread" .. os.time()
        local bin = named("yes", marker)
        local sp2 = spmod.new(P.open().ctx, { frameLineMax = 40000, pipeBufferBytes = 4096 })
        assert(sp2:spawn(spec({ "/bin/sh", "-c", "trap '' TERM; exec " .. bin },
          { graceMs = 200, stdio = { stdin = "ignore", stdout = "pipe", stderr = "pipe" } })))
        mb.sleep(300)                                   -- let it fill every buffer up to the host pipe
        assert(sp2:dispose())
        assert.are.same({}, survivors(marker))
      end)
    end)
  end)

  it("reports a sandbox deleted under a running command instead of hanging", function()
    -- runs last: it destroys the shared sandbox
    if P.open().name ~= "e2b" then return pending("only a sandbox can be deleted under a command") end
    P.run(function()
      local s = P.open()
      local h = assert(sp:spawn(spec({ "sleep", "300" })))
      assert(s.sandbox.api:delete(s.sandbox.id))
      -- done rejects only for a transport failure: never an outcome for a program that did not end
      local o, err = h:wait(30000)
      assert.is_nil(o)
      assert.is_table(err)
      assert.are_not.equal("MB_TIMEOUT", err.code)
      assert.truthy(tostring(err.code):match("^E2B_"), tostring(err))
      local gone, gerr = h:waitForExit(0)                -- the tree's state is unknown, not "alive"
      assert.is_nil(gone); assert.are.equal(err.code, gerr.code)
      -- still tracked: terminate proves it gone (the sandbox is) instead of failing or forgetting it
      assert.is_true(assert(h:terminate()))
      assert.is_true(h:waitForExit(0))
    end)
  end)
end)
