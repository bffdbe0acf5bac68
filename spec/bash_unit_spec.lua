-- The bash consumer's job states against a scripted subprocess seam: what the handle knows
-- decides a job's end, whichever task learns it first (disposal races the job's waiter).
local mb = require "moonbox"
local errors = require "moonbox.errors"
local bash_plugin = require "moonbox.consumers.bash"

-- A handle whose exit the test sets; exited() answers what `script` says.
local function fake_seam(script)
  local seam = { spawned = {} }
  function seam.spawn(_, spec)
    local h = { collected = {}, terminated = 0, spec = spec }
    for _, kind in ipairs({ "stdout", "stderr" }) do
      h.collected[kind] = { readFrom = function() return { text = "", nextOffset = 0, lossy = false } end }
    end
    function h.exited() return script(h) end
    function h.terminate(self) self.terminated = self.terminated + 1 return true end
    seam.spawned[#seam.spawned + 1] = h
    return h
  end
  return seam
end

local function new_bash(seam)
  return bash_plugin.new({ subprocess = seam }, { cwd = "/", timeoutMs = 1000, maxTimeoutMs = 1000,
    maxOutputBytes = 100, maxSpillBytes = 1000, graceMs = 10, shell = "bash" })
end

describe("bash consumer jobs (scripted seam)", function()
  it("a job whose waiter was canceled ends with the exit its handle knows, not 'killed'", function()
    mb.run(function()
      local seam = fake_seam(function(h)
        h.exit_fact = { exitCode = 4 }           -- the exit is in, but the waiter is canceled
        return nil, errors.new("MB_CANCELED", "task canceled")
      end)
      local b = new_bash(seam)
      local job = assert(b:start{ command = "exit 4" })
      mb.sleep(0)
      assert(b:dispose())
      assert.are.equal("completed", job.status)
      assert.are.equal(4, job.outcome.exitCode)
      assert.are.equal(0, seam.spawned[1].terminated)   -- nothing to kill: it had exited
      local r = b:read(job)
      assert.are.equal("completed", r.status)
      assert.are.equal(4, r.exitCode)
    end)
  end)

  it("disposal before the exit is known kills the job, and its end keeps the exit status", function()
    mb.run(function()
      local ev = mb.event()
      local seam = fake_seam(function(h)
        ev:wait()
        h.exit_fact = { signal = "SIGTERM" }
        return h.exit_fact
      end)
      local b = new_bash(seam)
      local job = assert(b:start{ command = "sleep 9" })
      mb.sleep(0)
      assert.are.equal("running", job.status)
      assert(b:dispose())
      assert.are.equal(1, seam.spawned[1].terminated)
      ev:set(true)
      mb.sleep(0)
      assert.are.equal("killed", job.status)
      assert.are.equal("SIGTERM", job.outcome.signal)
    end)
  end)

  it("a job a signal ended that it did not get from kill() is 'killed'", function()
    mb.run(function()
      local b = new_bash(fake_seam(function() return { signal = "SIGKILL" } end))
      local job = assert(b:start{ command = "kill -9 $$" })
      mb.sleep(0)
      assert.are.equal("killed", job.status)
      assert.are.equal("SIGKILL", b:read(job).signal)
    end)
  end)

  it("takes per-request tail limits within maxSpillBytes, and refuses others naming the field", function()
    mb.run(function()
      local seam = fake_seam(function() return { exitCode = 0 } end)
      local b = new_bash(seam)
      assert(b:start{ command = "true", stdoutMaxBytes = 1000, stderrMaxBytes = 0 })
      assert.are.equal(1000, seam.spawned[1].spec.stdio.stdout.maxBytes)
      assert.are.equal(0, seam.spawned[1].spec.stdio.stderr.maxBytes)
      assert(b:start{ command = "true" })
      assert.are.equal(100, seam.spawned[2].spec.stdio.stdout.maxBytes)
      for _, v in ipairs({ 1001, -1, 1.5, "10" }) do
        assert.has_error(function() b:run{ command = "true", stdoutMaxBytes = v } end,
          "bash: run: stdoutMaxBytes must be a whole number of bytes from 0 to maxSpillBytes (1000)")
      end
      assert.has_error(function() b:start{ command = "true", stdoutMaxByte = 5 } end)
    end)
  end)
end)
