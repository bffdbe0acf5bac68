-- 1000 randomized spawn/terminate cycles (TERM-ignoring, double-forking, pipe-holding
-- grandchildren); afterwards no process of any cycle may survive, checked inside the sandbox.
local P = require "seam.provider"

local CYCLES = tonumber(os.getenv("MB_STRESS_CYCLES") or "1000")
local WORKERS = 8

describe("spawn/terminate stress #sandboxd #stress", function()
  teardown(function() P.close() end)

  it(("leaves zero processes after %d randomized cycles"):format(CYCLES), function()
    local s = P.open()
    local sp, cwd = s.ctx.subprocess, s.cwd
    local mb = require "moonbox"
    local marker = "mbstress" .. os.time()
    local shapes = {
      "trap '' TERM; exec -a " .. marker .. " sleep 300",                                   -- ignores TERM
      "(trap '' TERM; exec -a " .. marker .. " sleep 300) & (setsid sh -c 'exec -a " .. marker .. " sleep 300' &); sleep 300", -- double fork
      "(exec -a " .. marker .. " sleep 300 &); echo started",                               -- grandchild holds stdout
      "echo quick",                                                                         -- exits on its own
    }
    local seed = tonumber(os.getenv("MB_STRESS_SEED") or tostring(os.time()))
    math.randomseed(seed)
    local plan = {}
    for i = 1, CYCLES do plan[i] = { shape = math.random(#shapes), delay = math.random(0, 20) } end
    P.run(function()
      local next_i, failures = 1, {}
      local function worker()
        while next_i <= CYCLES do
          local c = plan[next_i]; next_i = next_i + 1
          local h, err = sp:spawn{ argv = { "/bin/sh", "-c", shapes[c.shape] }, cwd = cwd, graceMs = 50,
            stdio = { stdin = "ignore", stdout = { maxBytes = 256 }, stderr = { maxBytes = 256 } } }
          if not h then failures[#failures + 1] = tostring(err) else
            if c.delay > 0 then mb.sleep(c.delay) end
            h:terminate()
            local o, werr = h:wait(20000)
            if not o then failures[#failures + 1] = "wait: " .. tostring(werr) end
            if h:waitForExit(20000) ~= true then failures[#failures + 1] = "tree survived (pgid " .. h.pid .. ")" end
          end
        end
      end
      local ws = {}
      for i = 1, WORKERS do ws[i] = mb.spawn(worker) end
      for _, w in ipairs(ws) do assert(w:join(600000)) end
      assert.are.same({}, failures, "seed " .. seed)
      local out = P.sh("n=0; for p in /proc/[0-9]*; do s=$(cut -d' ' -f3 $p/stat 2>/dev/null); [ \"$s\" = Z ] && continue; "
        .. "case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in " .. marker .. "*) n=$((n+1));; esac; done; echo $n")
      assert.are.equal("0\n", out, "seed " .. seed)
    end, 900000)
  end)
end)
