-- `moonbox sync push|pull|diff` as a Unix tool: usage errors, plain output and --json, the
-- progress bar on a terminal and plain lines otherwise, exit statuses, the record kept across
-- processes, and a push killed outright (SIGKILL) leaving the target as it was. On the host
-- providers (a local copy); #sandboxd: across processes on one sandbox (sandboxId).
local cjson = require "cjson"
local bin = require("support.cli").bin

local q = require("support.cli").q
local function sh(cmd)
  local p = assert(io.popen("(" .. cmd .. ") 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end
local function write(path, s) local f = assert(io.open(path, "w")); f:write(s); f:close() end

-- → exit status, stdout, stderr
local function moonbox(args, env)
  return require("support.cli").moonbox(args, { prefix = env or "env -u E2B_API_KEY -u E2B_API_URL -u E2B_SANDBOX_URL",
    stdin_null = true })
end

describe("moonbox sync", function()
  local dir, comp, host, world
  before_each(function()
    dir = (sh("mktemp -d /tmp/mb-sync-cli.XXXXXX")):gsub("\n", "")
    comp = dir .. "/compose.lua"
    write(comp, ('plugin "fs-local" {}\nplugin "workspace" { stateDir = %q }\n'):format(dir .. "/state"))
    host, world = dir .. "/host", dir .. "/world"
    sh(("mkdir -p %s/sub && printf one > %s/a.txt && printf two > %s/sub/b.txt"):format(q(host), q(host), q(host)))
  end)
  after_each(function() sh("rm -rf " .. q(dir)) end)

  it("exits 2 with the usage for bad usage, before anything is synced", function()
    local cases = { "sync", "sync frob", "sync push", ("sync push %s"):format(q(host)),
      ("sync push %s %s"):format(q(host), q(world)),                         -- no --compose
      ("sync pull --compose %s --prefer both %s %s"):format(q(comp), q(world), q(host)),
      ("sync push --compose %s --prefer host %s %s"):format(q(comp), q(host), q(world)),
      ("sync push --compose %s --max-files 0 %s %s"):format(q(comp), q(host), q(world)),
      ("sync push --compose %s %s %s extra"):format(q(comp), q(host), q(world)) }
    for _, args in ipairs(cases) do
      local code, out, err = moonbox(args)
      assert.are.equal(2, code, args .. ": " .. err)
      assert.are.equal("", out)
      assert.truthy(err:match("^moonbox: sync[^\n]+; run 'moonbox sync[%a ]* %-%-help' for usage\n$"), err)
    end
    assert.are.equal("", (sh(("ls %s 2>/dev/null"):format(q(world)))))
    local code, _, err = moonbox(("sync push --compose %s/none.lua %s %s"):format(q(dir), q(host), q(world)))
    assert.are.equal(1, code)
    assert.truthy(err:find("composition", 1, true))
  end)

  it("pushes, diffs and pulls, in plain lines or JSON, with one line per phase on a pipe", function()
    local code, out, err = moonbox(("sync push --compose %s %s %s"):format(q(comp), q(host), q(world)))
    assert.are.equal(0, code, err)
    assert.truthy(out:match("^pushed .- 2 files, 1 directories, 0 links"), out)
    assert.truthy(err:find("push: scanned 2 files", 1, true), err)
    assert.are.equal("one", (sh(("cat %s/a.txt"):format(q(world)))))
    sh(("printf changed > %s/a.txt && printf new > %s/sub/c.txt && rm %s/sub/b.txt"):format(q(world), q(world), q(world)))
    code, out = moonbox(("sync diff --compose %s %s %s"):format(q(comp), q(world), q(host)))
    assert.are.equal(0, code)
    assert.truthy(out:find("A sub/c.txt\nM a.txt\nD sub/b.txt\n", 1, true), out)
    assert.truthy(out:find("would pull 1 added, 1 modified, 1 deleted", 1, true), out)
    code, out = moonbox(("sync diff --json --compose %s %s %s"):format(q(comp), q(world), q(host)))
    assert.are.equal(0, code)
    local j = cjson.decode(out)
    assert.are.same({ "sub/c.txt" }, j.added)
    assert.are.same({}, j.modeChanged)                       -- an array, even empty
    assert.truthy(out:find('"modeChanged":[]', 1, true))
    assert.are.equal("one", (sh(("cat %s/a.txt"):format(q(host)))))
    code, out = moonbox(("sync pull --json --compose %s %s %s"):format(q(comp), q(world), q(host)))
    assert.are.equal(0, code)
    assert.are.equal(2, cjson.decode(out).files)                -- a.txt and sub/c.txt fetched
    assert.are.equal("changed", (sh(("cat %s/a.txt"):format(q(host)))))
    assert.are.equal("", (sh(("ls %s/sub/b.txt 2>/dev/null"):format(q(host)))))
  end)

  it("exits 3 when a pull leaves conflicts, 0 once --prefer resolves them", function()
    assert.are.equal(0, (moonbox(("sync push --compose %s %s %s"):format(q(comp), q(host), q(world)))))
    sh(("printf host > %s/a.txt && printf world > %s/a.txt"):format(q(host), q(world)))
    local code, out = moonbox(("sync pull --compose %s %s %s"):format(q(comp), q(world), q(host)))
    assert.are.equal(3, code)
    assert.truthy(out:find("C a.txt: changed on the host since the push (not applied)", 1, true), out)
    assert.are.equal("host", (sh(("cat %s/a.txt"):format(q(host)))))
    code, out = moonbox(("sync pull --prefer sandbox --compose %s %s %s"):format(q(comp), q(world), q(host)))
    assert.are.equal(0, code, out)
    assert.truthy(out:find("(taken from the world)", 1, true), out)
    assert.are.equal("world", (sh(("cat %s/a.txt"):format(q(host)))))
    code = moonbox(("sync pull --compose %s %s/never %s"):format(q(comp), q(dir), q(host)))
    assert.are.equal(1, code)
  end)

  it("draws a progress bar (bytes and files) on a terminal", function()
    if select(2, sh("command -v script")) ~= 0 then pending("script(1) is not installed") return end
    sh(("cd %s && for i in $(seq 1 200); do head -c 20000 /dev/urandom > f$i; done"):format(q(host)))
    local out = sh(("script -qec %s /dev/null"):format(q(("%s sync push --compose %s %s %s"):format(q(bin), q(comp), q(host), q(world)))))
    assert.truthy(out:find("\r\27[K", 1, true), out)
    assert.truthy(out:find("%[[#%.]+%] +%d+%%"), out)
    assert.truthy(out:find("MiB", 1, true) and out:find("files", 1, true), out)
    assert.truthy(out:find("pushed ", 1, true), out)
  end)

  it("leaves the target as it was when the process is killed mid-push", function()
    assert.are.equal(0, (moonbox(("sync push --compose %s %s %s"):format(q(comp), q(host), q(world)))))
    sh(("cd %s && for i in $(seq 1 40); do head -c 1500000 /dev/urandom > big$i; done"):format(q(host)))
    -- start it, wait until its archive is being written next to the target, kill -9
    local out = sh(([[%s sync push --compose %s %s %s >/dev/null 2>&1 & pid=$!
      for i in $(seq 1 3000); do
        f=$(ls %s/.moonbox-sync-*.tmp/archive.tar 2>/dev/null | head -1)
        if [ -n "$f" ] && [ "$(stat -c %%s "$f")" -gt 0 ]; then kill -9 $pid; echo killed; break; fi
        sleep 0.01
      done; wait $pid; echo "status $?"]]):format(q(bin), q(comp), q(host), q(world), q(dir)))
    assert.truthy(out:find("killed\n", 1, true) and out:find("status 137", 1, true), out)
    assert.are.equal("a.txt\nsub\n", (sh(("ls %s"):format(q(world)))))
    assert.are.equal("one", (sh(("cat %s/a.txt"):format(q(world)))))
    -- and the next push goes through
    assert.are.equal(0, (moonbox(("sync push --compose %s %s %s"):format(q(comp), q(host), q(world)))))
    assert.are.equal("1500000", (sh(("stat -c %%s %s/big40"):format(q(world)))):gsub("\n", ""))
  end)
end)

describe("moonbox sync on a sandbox #sandboxd", function()
  it("keeps its record across processes (a sandbox named by sandboxId)", function()
    local mb = require "moonbox"
    local api = require("moonbox.e2b.api").new{ url = os.getenv("E2B_API_URL"), api_key = os.getenv("E2B_API_KEY"), http = mb.http }
    local info = mb.run(function() return assert(api:create{ timeout_ms = 300000 }) end)
    local dir = (sh("mktemp -d /tmp/mb-sync-cli.XXXXXX")):gsub("\n", "")
    local comp = dir .. "/compose.lua"
    write(comp, ('plugin "e2b" { sandboxId = %q }\nplugin "fs" {}\nplugin "subprocess" {}\nplugin "workspace" { stateDir = %q }\n')
      :format(info.id, dir .. "/state"))
    local host = dir .. "/host"
    sh(("mkdir -p %s && printf one > %s/a.txt"):format(q(host), q(host)))
    local env = "env"
    local ok, err = pcall(function()
      local code, out, e = moonbox(("sync push --compose %s %s /home/user/ws"):format(q(comp), q(host)), env)
      assert.are.equal(0, code, e)
      assert.truthy(out:find("pushed", 1, true))
      write(dir .. "/change.lua", [[
        local ctx = ...
        local t = assert(ctx.fs:resolve("/home/user/ws/a.txt"))
        assert(ctx.fs:writeText(t, "from the sandbox"))]])
      code, out, e = moonbox(("run %s %s"):format(q(comp), q(dir .. "/change.lua")), env)
      assert.are.equal(0, code, out .. e)
      code, out, e = moonbox(("sync pull --compose %s /home/user/ws %s"):format(q(comp), q(host)), env)
      assert.are.equal(0, code, e)
      assert.truthy(out:find("M a.txt", 1, true), out)
      assert.are.equal("from the sandbox", (sh(("cat %s/a.txt"):format(q(host)))))
    end)
    mb.run(function() api:delete(info.id) end)
    sh("rm -rf " .. q(dir))
    assert(ok, err)
  end)
end)
