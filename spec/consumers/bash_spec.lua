-- The bash consumer (ctx.bash) on whichever provider family MOONBOX_SEAM_PROVIDER names: the
-- behaviours of reference §5.1.1 without its defects, under constant garbage collection.
local P = require "seam.provider"

-- Running copies of `program` (P.named), not the wrappers whose command line mentions it.
local function running(program)
  local n = 0
  for _, l in ipairs(P.survivors(program)) do
    if l:match("^%d+ (%S+)") == program then n = n + 1 end
  end
  return n
end

describe("bash consumer #sandboxd", function()
  local bash, mb
  setup(function() bash = P.open().ctx.bash; mb = require "moonbox" end)
  teardown(function() P.close() end)

  it("runs a command: exit code, both streams, the base environment under the caller's", function()
    P.run_gc(function()
      local r = assert(bash:run{ command = 'echo "$NO_COLOR $TERM $PAGER $GIT_PAGER $MINE"; echo oops >&2; exit 3',
        env = { MINE = "yes", PAGER = "less" } })
      assert.are.equal(3, r.exitCode)
      assert.is_nil(r.signal)
      assert.are.equal("1 dumb less cat yes\n", r.stdout)
      assert.are.equal("oops\n", r.stderr)
      assert.is_false(r.timedOut)
      assert.is_false(r.aborted)
      assert.is_false(r.truncated)
      assert.are.equal(120000, r.timeoutMs)
    end)
  end)

  it("runs in the request's cwd, else the plugin's; stdin from the request, else /dev/null", function()
    P.run_gc(function()
      local dir = P.scratch("cwd")
      assert(bash:run{ command = "mkdir -p '" .. dir .. "'" })
      assert.are.equal(dir .. "\n", assert(bash:run{ command = "pwd -P", cwd = dir }).stdout)
      assert.are.equal(P.open().cwd .. "\n", assert(bash:run{ command = "pwd" }).stdout)
      assert.are.equal("a\nb\n", assert(bash:run{ command = "cat", stdin = "a\nb\n" }).stdout)
      assert.are.equal("0\n", assert(bash:run{ command = "wc -c < /dev/stdin" }).stdout)
    end)
  end)

  it("names a missing cwd instead of blaming bash (reference defect)", function()
    P.run_gc(function()
      local r, err = bash:run{ command = "true", cwd = "/no/such/dir" }
      assert.is_nil(r)
      assert.are.equal("SPAWN_FAILED", err.code)
      assert.truthy(err.message:find("/no/such/dir", 1, true), err.message)
    end)
  end)

  it("times out: the whole tree ends, what it printed is kept", function()
    P.run_gc(function()
      local sleeper = P.named("sleep", "mbx-bash-to-sleep")
      -- 2 s: the command has printed (or set its trap) long before, however loaded the machine
      local r = assert(bash:run{ command = "echo before; " .. sleeper .. " 60 & " .. sleeper .. " 61", timeoutMs = 2000 })
      assert.is_true(r.timedOut)
      assert.is_false(r.aborted)
      assert.are.equal("SIGTERM", r.signal)
      assert.is_nil(r.exitCode)
      assert.are.equal("before\n", r.stdout)
      assert.are.same({}, P.survivors("mbx-bash-to-sleep"))
    end)
  end)

  it("reports a trapped TERM's own exit code as a timeout, and KILLs what ignores TERM", function()
    P.run_gc(function()
      local r = assert(bash:run{ command = "trap 'exit 7' TERM; while :; do sleep 0.05; done", timeoutMs = 2000 })
      assert.are.equal(7, r.exitCode)
      assert.is_nil(r.signal)
      assert.is_true(r.timedOut)
      r = assert(bash:run{ command = "trap '' TERM; while :; do sleep 0.05; done", timeoutMs = 2000 })
      assert.are.equal("SIGKILL", r.signal)
      assert.is_true(r.timedOut)
    end)
  end)

  it("reports a real signal death with neither flag", function()
    P.run_gc(function()
      local r = assert(bash:run{ command = "kill -9 $$" })
      assert.are.equal("SIGKILL", r.signal)
      assert.is_nil(r.exitCode)
      assert.is_false(r.timedOut)
      assert.is_false(r.aborted)
    end)
  end)

  it("aborts on the caller's cancel event, and when the calling task is canceled", function()
    P.run_gc(function()
      local cancel = mb.event()
      local flag = P.scratch("started")   -- canceled once the command has started, however slow the start
      mb.spawn(function()
        repeat mb.sleep(20) until select(2, P.sh("test -e '" .. flag .. "'")) == 0
        cancel:set(true)
      end)
      local r = assert(bash:run{ command = "echo started; : > '" .. flag .. "'; sleep 60", cancel = cancel })
      assert.is_true(r.aborted)
      assert.is_false(r.timedOut)
      assert.are.equal("SIGTERM", r.signal)
      assert.are.equal("started\n", r.stdout)

      local sleeper = P.named("sleep", "mbx-bash-cancel")
      local t = mb.spawn(function() return bash:run{ command = sleeper .. " 60" } end)
      mb.sleep(300)
      t:cancel()
      local ok, res = t:join(10000)
      assert.is_true(ok)
      r = res
      assert.is_true(r.aborted)
      assert.are.equal("SIGTERM", r.signal)
      assert.are.same({}, P.survivors("mbx-bash-cancel"))
    end)
  end)

  it("returns when bash exits, not when a background child lets go of the output", function()
    P.run_gc(function()
      local sleeper = P.named("sleep", "mbx-bash-leftover")
      local r = assert(bash:run{ command = sleeper .. " 30 & echo done" })
      assert.are.equal(0, r.exitCode)
      assert.are.equal("done\n", r.stdout)
      -- still running: the call did not wait for it
      assert.are.equal(1, running(sleeper))
      P.sh("pkill -f mbx-bash-leftover")
    end)
  end)

  it("clamps the timeout to maxTimeoutMs and refuses a non-positive one", function()
    P.run_gc(function()
      assert.are.equal(600000, assert(bash:run{ command = "true", timeoutMs = 99999999 }).timeoutMs)
      assert.has_error(function() bash:run{ command = "true", timeoutMs = 0 } end,
        "bash: run: timeoutMs must be a positive finite number of milliseconds")
    end)
  end)

  it("keeps the last 64000 bytes of a larger output and spills the whole stream", function()
    P.run_gc(function()
      local r = assert(bash:run{ command = "head -c 64000 /dev/zero | tr '\\0' a" })
      assert.are.equal(64000, #r.stdout)
      assert.is_false(r.truncated)
      assert.is_nil(r.spillPath)
      r = assert(bash:run{ command = "printf b; head -c 64000 /dev/zero | tr '\\0' a" })
      assert.are.equal(64000, #r.stdout)
      assert.are.equal(("a"):rep(64000), r.stdout)
      assert.is_true(r.truncated)
      assert.is_string(r.spillPath)
      local out = P.sh("wc -c < '" .. r.spillPath .. "'; head -c 1 '" .. r.spillPath .. "'; stat -c %a '" .. r.spillPath .. "'")
      assert.are.equal("64001\nb600\n", out)
    end)
  end)

  it("decodes invalid UTF-8 with one U+FFFD per maximal ill-formed subsequence", function()
    P.run_gc(function()
      local r = assert(bash:run{ command = "printf 'ok\\377\\376é'" })
      assert.are.equal("ok\xEF\xBF\xBD\xEF\xBF\xBDé", r.stdout)     -- two bad bytes: two
      r = assert(bash:run{ command = "printf 'a\\342\\202b\\360\\237\\230'" })
      assert.are.equal("a\xEF\xBF\xBDb\xEF\xBF\xBD", r.stdout)       -- a cut € and a cut emoji: one each
    end)
  end)

  it("lets a request raise its stdout tail (stdoutMaxBytes) and lower its stderr tail", function()
    P.run_gc(function()
      local r = assert(bash:run{ command = "head -c 70000 /dev/zero | tr '\\0' a; head -c 10 /dev/zero | tr '\\0' e >&2",
        stdoutMaxBytes = 70000, stderrMaxBytes = 4 })
      assert.are.equal(70000, #r.stdout)
      assert.are.equal("eeee", r.stderr)
      assert.is_true(r.truncated)                         -- stderr's tail lost 6 bytes
      assert.is_nil(r.spillPath)
      assert.is_string(r.stderrSpillPath)
    end)
  end)

  it("refuses bad requests with the field named", function()
    assert.has_error(function() bash:run("ls") end, "bash: run expects a table { command = ... }")
    assert.has_error(function() bash:run{} end, "bash: run: command must be a non-empty string")
    assert.has_error(function() bash:run{ command = "ls", env = "x" } end, "bash: run: env must be a table of name = string|false")
    assert.has_error(function() bash:run{ command = "ls", stdin = 3 } end, "bash: run: stdin must be a string")
    assert.has_error(function() bash:run{ command = "ls", cwd = "" } end, "bash: run: cwd must be a non-empty path")
    assert.has_error(function() bash:run{ command = "ls", cancel = true } end, "bash: run: cancel must be an mb.event()")
    assert.has_error(function() bash:read(12345) end, "bash: no such job: 12345")
    assert.has_error(function() bash:run{ command = "ls", timeoutms = 300 } end,
      "bash: run: unknown field timeoutms (expected command, cwd, env, stdin, timeoutMs, cancel, stdoutMaxBytes, stderrMaxBytes; the nearest is timeoutMs)")
    assert.has_error(function() bash:start{ command = "ls", timeoutMs = 300 } end,
      "bash: start: unknown field timeoutMs (expected command, cwd, env, stdin, stdoutMaxBytes, stderrMaxBytes)")
  end)

  describe("background jobs", function()
    it("reads new output incrementally, stderr marked, cursors moving", function()
      P.run_gc(function()
        local flag = P.scratch("go")
        local job = assert(bash:start{ command = "echo one; echo e1 >&2; while [ ! -e '" .. flag .. "' ]; do sleep 0.02; done; echo two" })
        assert.are.equal("running", job.status)
        local r, seen = nil, ""
        repeat r = bash:read(job, r and r.cursor) seen = seen .. r.delta mb.sleep(20) until seen:find("e1")
        assert.are.equal("one\n[stderr]\ne1\n", seen)
        assert.are.equal("running", r.status)
        P.sh("touch '" .. flag .. "'")
        local last
        repeat last = bash:read(job, r.cursor) mb.sleep(20) until last.status ~= "running"
        last = bash:read(job, r.cursor)
        assert.are.equal("two\n", last.delta)
        assert.are.equal("completed", last.status)
        assert.are.equal(0, last.exitCode)
        assert.are.equal(#"one\ntwo\n", last.cursor.stdout)
      end)
    end)

    it("never splits a UTF-8 character between two reads (reference defect)", function()
      P.run_gc(function()
        local flag = P.scratch("utf8")
        local job = assert(bash:start{ command = "printf '\\303'; while [ ! -e '" .. flag .. "' ]; do sleep 0.02; done; printf '\\251\\n'" })
        -- the first byte has arrived (the collector holds it)
        repeat mb.sleep(20) until job.h.collected.stdout:readFrom(0).nextOffset == 1
        local r = bash:read(job)
        assert.are.equal("", r.delta)
        assert.are.equal(0, r.cursor.stdout)
        P.sh("touch '" .. flag .. "'")
        repeat mb.sleep(20) until bash:read(job).status ~= "running"
        assert.are.equal("é\n", bash:read(job, r.cursor).delta)
      end)
    end)

    it("says 'killed' for a job a signal ended that it did not get from kill()", function()
      P.run_gc(function()
        local job = assert(bash:start{ command = "echo x; kill -9 $$" })
        repeat mb.sleep(20) until bash:read(job).status ~= "running"
        local r = bash:read(job)
        assert.are.equal("killed", r.status)
        assert.are.equal("SIGKILL", r.signal)
        assert.is_nil(r.exitCode)
      end)
    end)

    it("points a lossy read at the spill file holding the whole stream", function()
      P.run_gc(function()
        local job = assert(bash:start{ command = "head -c 64001 /dev/zero | tr '\\0' a; echo e >&2" })
        repeat mb.sleep(20) until bash:read(job).status ~= "running"
        local r = bash:read(job)
        assert.is_true(r.lossy)
        assert.are.equal(64000, #r.stdout)
        assert.is_string(r.stdoutSpillPath)
        assert.is_nil(r.stderrSpillPath)                  -- stderr lost nothing
        assert.are.equal("64001\n", P.sh("wc -c < '" .. r.stdoutSpillPath .. "'"))
        assert.is_nil(bash:read(job, r.cursor).stdoutSpillPath)   -- nothing lost since the cursor
      end)
    end)

    it("kills a job's whole tree, double-forked descendants too; list shows every job", function()
      P.run_gc(function()
        local sleeper = P.named("sleep", "mbx-bash-job")
        local job = assert(bash:start{ command = "setsid sh -c '" .. sleeper .. " 100 &'; " .. sleeper .. " 101" })
        repeat mb.sleep(20) until running(sleeper) == 2
        local listed = false
        for _, j in ipairs(bash:list()) do if j == job then listed = true end end
        assert.is_true(listed)
        assert(bash:kill(job))
        repeat mb.sleep(20) until bash:read(job).status ~= "running"
        assert.are.equal("killed", bash:read(job).status)
        assert.are.same({}, P.survivors("mbx-bash-job"))
        assert.is_true(bash:kill(job))                -- again: nothing to do
      end)
    end)
  end)
end)
