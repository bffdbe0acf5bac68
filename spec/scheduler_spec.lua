-- The coroutine scheduler: tasks, sleep, joins with timeouts, cancel, events, queues, errors.
local mb = require "moonbox"
local H = require "spec.support.helpers"

describe("scheduler", function()
  it("runs the main task and returns its results", function()
    local a, b = mb.run(function(x, y) return x + 1, y .. "!" end, 1, "hi")
    assert.equal(2, a)
    assert.equal("hi!", b)
  end)

  it("re-raises the main task's error with a traceback", function()
    local ok, err = pcall(mb.run, function() error("boom") end)
    assert.is_false(ok)
    assert.matches("boom", err)
    assert.matches("stack traceback", err)
  end)

  it("re-raises an error object as itself", function()
    local ok, err = pcall(mb.run, function() error(mb.error("X_CODE", "msg")) end)
    assert.is_false(ok)
    assert.is_true(mb.is_error(err))
    assert.equal("X_CODE", err.code)
  end)

  it("interleaves tasks through sleep in deadline order", function()
    local order = {}
    H.run(function()
      local a = mb.spawn(function() mb.sleep(30); order[#order + 1] = "a" end)
      local b = mb.spawn(function() mb.sleep(1); order[#order + 1] = "b" end)
      assert.is_true(a:join(5000))
      assert.is_true(b:join(5000))
    end)
    assert.same({ "b", "a" }, order)
  end)

  it("sleep waits at least the given time", function()
    local elapsed = H.run(function()
      local t0 = mb.now()
      assert.is_true(mb.sleep(20))
      return mb.now() - t0
    end)
    assert.is_true(elapsed >= 19, "slept " .. elapsed)
  end)

  it("join returns the task's results", function()
    H.run(function()
      local t = mb.spawn(function(x) mb.sleep(1); return x * 2, "y" end, 21)
      local ok, v, y = t:join(5000)
      assert.is_true(ok)
      assert.equal(42, v)
      assert.equal("y", y)
      assert.is_true(t:done())
      local ok2, v2 = t:join(0) -- joining a finished task again
      assert.is_true(ok2)
      assert.equal(42, v2)
    end)
  end)

  it("a join timeout says where the joined task is blocked", function()
    H.run(function()
      local function stuck_in_here() mb.event():wait(60000) end
      local t = mb.spawn(stuck_in_here)
      local ok, err = t:join(1)
      assert.is_nil(ok)
      assert.equal("MB_TIMEOUT", err.code)
      assert.matches("blocked at:.*in method 'wait'.*scheduler_spec%.lua:%d+", err.message)
      t:cancel()
      assert.is_nil(select(2, t:join(5000)))
    end)
  end)

  it("join times out with MB_TIMEOUT and the task keeps running", function()
    H.run(function()
      local ev = mb.event()
      local t = mb.spawn(function() return ev:wait() end)
      local ok, err = t:join(10)
      assert.is_nil(ok)
      assert.equal("MB_TIMEOUT", err.code)
      assert.is_false(t:done())
      ev:set("later")
      local ok2, v = t:join(5000)
      assert.is_true(ok2)
      assert.equal("later", v)
    end)
  end)

  it("an error inside a task comes back from join, not through C", function()
    H.run(function()
      local t = mb.spawn(function() mb.sleep(1); error("inside") end)
      local ok, err = t:join(5000)
      assert.is_nil(ok)
      assert.equal("MB_TASK_FAILED", err.code)
      assert.matches("inside", err.message)
      assert.matches("stack traceback", err.message)
      local t2 = mb.spawn(function() error(mb.error("E_MINE", "m", { extra = 1 })) end)
      local _, err2 = t2:join(5000)
      assert.equal("E_MINE", err2.code)
      assert.equal(1, err2.extra)
    end)
  end)

  it("cancel makes the blocked call return MB_CANCELED", function()
    H.run(function()
      local got
      local t = mb.spawn(function()
        local ok, err = mb.sleep(60000)
        got = err
        return ok
      end)
      mb.sleep(1)
      assert.is_true(t:cancel())
      local ok = t:join(5000)
      assert.is_true(ok)
      assert.equal("MB_CANCELED", got.code)
    end)
  end)

  it("cancel before the task blocks applies to its next yielding call only", function()
    H.run(function()
      local results = {}
      local t = mb.spawn(function()
        results[1] = select(2, mb.sleep(1))
        results[2] = mb.sleep(1)
      end)
      t:cancel()
      assert.is_true(t:join(5000))
      assert.equal("MB_CANCELED", results[1].code)
      assert.is_true(results[2])
    end)
  end)

  it("events wake every waiter with the set values, once", function()
    H.run(function()
      local ev = mb.event()
      local seen = {}
      local ts = {}
      for i = 1, 3 do ts[i] = mb.spawn(function() local a, b = ev:wait(5000); seen[i] = a .. b end) end
      mb.sleep(1)
      assert.is_true(ev:set("x", "y"))
      assert.is_false(ev:set("z"))
      for i = 1, 3 do assert.is_true(ts[i]:join(5000)) end
      assert.same({ "xy", "xy", "xy" }, seen)
      assert.equal("x", ev:wait(0))
      local ev2 = mb.event()
      local v, err = ev2:wait(5)
      assert.is_nil(v)
      assert.equal("MB_TIMEOUT", err.code)
    end)
  end)

  it("bounded queues block producers when full and drain after close", function()
    H.run(function()
      local q = mb.queue(2)
      assert.is_true(q:push(1))
      assert.is_true(q:push(2))
      local ok, err = q:push(3, 5)
      assert.is_nil(ok)
      assert.equal("MB_TIMEOUT", err.code)
      local producer = mb.spawn(function() return q:push(3, 5000) end)
      mb.sleep(1)
      assert.equal(1, q:pop(0))
      assert.is_true(select(2, producer:join(5000)))
      assert.equal(2, q:pop(0))
      assert.equal(3, q:pop(0))
      local consumer = mb.spawn(function() return q:pop(5000) end)
      mb.sleep(1)
      q:close()
      local _, v, cerr = consumer:join(5000)
      assert.is_nil(v)
      assert.equal("MB_CLOSED", cerr.code)
      local pok, perr = q:push(4)
      assert.is_nil(pok)
      assert.equal("MB_CLOSED", perr.code)
    end)
  end)

  it("errors made in C are the same type as errors made in Lua", function()
    local core = mb.core
    local lock, lerr = core.lock_file("/nonexistent-dir/x.lock")
    assert.is_nil(lock)
    assert.is_true(mb.is_error(lerr))
    assert.are.equal(getmetatable(mb.error("X", "y")), getmetatable(lerr))
    assert.truthy(tostring(lerr):match("^MB_NOT_FOUND: lock /nonexistent%-dir/x%.lock: "), tostring(lerr))
    local d = core.procstream{ stdout = "queue" }
    local ok, perr = d:push(core.envelope(0, "{nope"))
    assert.is_nil(ok)
    assert.is_true(mb.is_error(perr))
    assert.are.equal("E2B_PROTOCOL", perr.code)
    H.run(function()
      local r, herr = mb.http.request{ url = "http://[::1", max_bytes = 10 }
      assert.is_nil(r)
      assert.is_true(mb.is_error(herr))
      local p = assert(mb.proc.spawn{ argv = { "true" } })
      assert.is_nil(p:read("stdout", 5000))            -- end of stream is a bare nil
      assert.are.equal(0, (p:wait(5000)))
      local kok, kerr = p:kill("TERM")
      assert.is_nil(kok)
      assert.is_true(mb.is_error(kerr))
      assert.are.equal("MB_EXITED", kerr.code)
      p:close()
    end)
  end)

  it("core.secret_pipe: a child reads the secret on an inherited descriptor, once; never in its argv", function()
    local core = mb.core
    local secret = "e2b_" .. ("5a"):rep(20)
    local kp = assert(core.secret_pipe(secret))
    H.run(function()
      -- fd 3 of the child: sh reads it to its end; its command line holds no secret
      local p = assert(mb.proc.spawn{ argv = { "/bin/sh", "-c", "cat <&3; echo; cat <&3; echo end" },
        inherit_fds = { kp:fd() } })
      kp:close()
      local out = ""
      while true do local c = p:read("stdout", 5000) if not c then break end out = out .. c end
      assert.are.equal(0, (p:wait(5000)))
      p:close()
      assert.are.equal(secret .. "\nend\n", out)      -- the second read finds the end: read once
    end)
    assert.has_error(function() kp:fd() end, "descriptor is closed")
    kp:close()                                          -- twice is harmless
    assert.has_error(function() core.secret_pipe(("x"):rep(4097)) end)
    local empty = assert(core.secret_pipe(""))
    assert.is_number(empty:fd())
    empty:release()                                     -- a lock's word for close
    assert.has_error(function() empty:fd() end, "descriptor is closed")
  end)

  it("error objects have code, message, fields and __tostring", function()
    local e = mb.error("E2B_TIMEOUT", "too slow", { after_ms = 5 })
    assert.equal("E2B_TIMEOUT", e.code)
    assert.equal("too slow", e.message)
    assert.equal(5, e.after_ms)
    assert.equal("E2B_TIMEOUT: too slow", tostring(e))
    assert.is_true(mb.is_error(e))
    assert.is_false(mb.is_error({ code = "X" }))
  end)

  it("programming mistakes raise", function()
    assert.has_error(function() mb.sleep(1) end)          -- outside a task
    assert.has_error(function() mb.spawn("nope") end)
    assert.has_error(function() mb.error(42) end)
    assert.has_error(function() mb.queue(0) end)
    H.run(function()
      assert.has_error(function() mb.sleep(-1) end)
      assert.has_error(function() mb.event():wait("soon") end)
      assert.has_error(function() mb.queue(1):push(nil) end)
      assert.has_error(function() mb.run(function() end) end) -- nested run
      local me = mb.current()
      assert.has_error(function() me:join(1) end)           -- self-join
      local co = coroutine.wrap(function() mb.sleep(1) end)
      assert.has_error(co)                                  -- yield from a nested coroutine
    end)
  end)

  it("detects a main task that nothing can wake", function()
    local ok, err = pcall(mb.run, function() mb.event():wait() end)
    assert.is_false(ok)
    assert.matches("nothing is pending", err)
  end)

  it("a raising loop callback surfaces from mb.run instead of crossing C", function()
    local core = mb.core
    local ok, err = pcall(mb.run, function()
      local tm = core.timer()
      tm:start(1, function() error("cb-failure") end)
      mb.sleep(50)
    end)
    assert.is_false(ok)
    assert.matches("cb%-failure", err)
  end)

  it("a plain coroutine.yield inside a task yields to other tasks", function()
    local order = {}
    H.run(function()
      local a = mb.spawn(function() order[#order + 1] = 1; coroutine.yield(); order[#order + 1] = 3 end)
      local b = mb.spawn(function() order[#order + 1] = 2 end)
      assert.is_true(a:join(5000))
      assert.is_true(b:join(5000))
    end)
    assert.same({ 1, 2, 3 }, order)
  end)

  it("host processes: output, exit code, signal, spawn failure", function()
    H.run(function()
      local p = assert(mb.proc.spawn{ argv = { "sh", "-c", "echo out; echo err >&2; exit 3" } })
      local out = ""
      while true do local d = p:read("stdout", 5000); if not d then break end; out = out .. d end
      assert.equal("out\n", out)
      assert.equal("err\n", p:read("stderr", 5000))
      local code, sig = p:wait(5000)
      assert.equal(3, code)
      assert.equal(0, sig)
      p:close()

      local q = assert(mb.proc.spawn{ argv = { "sh", "-c", "echo $FOO; pwd" }, env = { FOO = "bar" }, cwd = "/" })
      local s = ""
      while true do local d = q:read("stdout", 5000); if not d then break end; s = s .. d end
      assert.equal("bar\n/\n", s)
      q:wait(5000)

      local k = assert(mb.proc.spawn{ argv = { "sleep", "30" } })
      local c, err = k:wait(5)
      assert.is_nil(c)
      assert.equal("MB_TIMEOUT", err.code)
      assert.is_true(k:kill("TERM"))
      local kc, ks = k:wait(5000)
      assert.equal(0, kc)
      assert.equal(15, ks)
      local kok, kerr = k:kill("KILL") -- already exited
      assert.is_nil(kok)
      assert.equal("MB_EXITED", kerr.code)
      assert.has_error(function() k:kill("NOSUCHSIG") end)

      -- closing wakes a blocked reader with MB_CLOSED
      local z = assert(mb.proc.spawn{ argv = { "sleep", "30" } })
      local reader = mb.spawn(function() return z:read("stdout", 30000) end)
      mb.sleep(1)
      z:kill("KILL")
      z:close()
      local _, zd, zerr = reader:join(5000)
      assert.is_nil(zd)
      assert.equal("MB_CLOSED", zerr.code)

      local bad, berr = mb.proc.spawn{ argv = { "/nonexistent/binary" } }
      assert.is_nil(bad)
      assert.equal("SPAWN_FAILED", berr.code)
      assert.matches("no such file", berr.message:lower())
    end)
  end)

  describe("the moonbox program", function()
    local bin = (os.getenv("MB_BUILD_DIR") or "build") .. "/bin/moonbox"
    local function run(argv)
      return H.run(function()
        local p = assert(mb.proc.spawn{ argv = argv })
        local out, err = {}, {}
        for _, which in ipairs({ "stdout", "stderr" }) do
          local acc = which == "stdout" and out or err
          while true do local d = p:read(which, 10000); if not d then break end; acc[#acc + 1] = d end
        end
        local code = p:wait(10000)
        p:close()
        return code, table.concat(out), table.concat(err)
      end)
    end
    local function script(src)
      local path = os.tmpname()
      local f = assert(io.open(path, "w")); f:write(src); f:close()
      return path
    end

    it("runs a script as the main task with its arguments", function()
      local path = script([[
        local mb = require "moonbox"
        local a, b = ...
        assert(mb.current(), "not inside a task")
        assert(mb.sleep(1))
        assert(arg[1] == a and arg[2] == b and arg[0]:match("lua"), "arg table")
        io.write(a, "+", b, "\n")
        assert(require("moonbox.policies").default("env").build)
      ]])
      local code, out = run({ bin, path, "x", "y" })
      os.remove(path)
      assert.equal(0, code)
      assert.equal("x+y\n", out)
    end)

    it("reports a script error with a traceback and exit status 1", function()
      local path = script("error('script-broke')")
      local code, _, err = run({ bin, path })
      os.remove(path)
      assert.equal(1, code)
      assert.matches("script%-broke", err)
      assert.matches("stack traceback", err)
    end)

    it("prints usage with exit status 2 when called wrongly", function()
      local code, _, err = run({ bin })
      assert.equal(2, code)
      assert.matches("^moonbox: no command given [^\n]*; run 'moonbox %-%-help' for usage\n$", err)
      code = run({ bin, "run", "only-compose.lua" })
      assert.equal(2, code)
    end)
  end)
end)
