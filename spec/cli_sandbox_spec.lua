-- `moonbox sandbox …` against the suite's sandboxd: each command, its --json, its exit status
-- and its one-line error for an unknown id or a usage mistake.
local cjson = require "cjson"

local cli = require "support.cli"
local q = cli.q

-- → exit status, stdout, stderr
local function moonbox(args, env) return cli.moonbox(args, { prefix = env }) end

local function one_line(s) return select(2, s:gsub("\n", "")) == 1 and s:sub(-1) == "\n" end

describe("moonbox sandbox #sandboxd", function()
  local mb, client, id
  setup(function()
    mb = require "moonbox"
    client = mb.run(function() return assert(require("moonbox.e2b").client{}) end)
  end)
  before_each(function()
    id = mb.run(function() return assert(client.api:create{ timeout_ms = 120000, metadata = { cli = "spec" } }).id end)
  end)
  after_each(function() mb.run(function() client:kill(id) end) end)

  it("lists, shows, pauses, resumes and kills a sandbox; --json prints the API's objects", function()
    local code, out = moonbox("sandbox list --metadata cli=spec --json")
    assert.are.equal(0, code)
    local found = false
    for _, it in ipairs(cjson.decode(out)) do if it.sandboxId == id then found = true end end
    assert.is_true(found)
    code, out = moonbox("sandbox list --state running")
    assert.are.equal(0, code)
    assert.truthy(out:find("^SANDBOX ID"), out)
    assert.truthy(out:find(id, 1, true), out)
    code, out = moonbox("sandbox info --json " .. id)
    assert.are.equal(0, code)
    assert.are.equal("spec", cjson.decode(out).metadata.cli)
    code, out = moonbox("sandbox pause " .. id)
    assert.are.same({ 0, "paused " .. id .. "\n" }, { code, out })
    code, out = moonbox("sandbox pause " .. id .. " --json")
    assert.are.equal(0, code)
    assert.is_true(cjson.decode(out).already)
    code, out = moonbox("sandbox resume " .. id .. " --timeout 60")
    assert.are.same({ 0, "resumed " .. id .. "\n" }, { code, out })
    code, out = moonbox("sandbox host " .. id .. " 3000")
    assert.are.equal(0, code)
    assert.are.equal(("%s/_sandbox/%s/3000/\n"):format(os.getenv("E2B_SANDBOX_URL"), id), out)
    code, out = moonbox("sandbox kill " .. id)
    assert.are.same({ 0, "killed " .. id .. "\n" }, { code, out })
  end)

  it("creates a sandbox that outlives the command, with its template, lease, metadata and env", function()
    local code, out, err = moonbox("sandbox create --timeout 5m --metadata cli=created --env GREETING=hi --json")
    assert.are.equal(0, code, err)
    local made = cjson.decode(out).sandboxId
    local ok, perr = pcall(function()
      local info = mb.run(function() return assert(client:info(made)) end)
      assert.are.same({ "running", "created", "base" }, { info.state, info.metadata.cli, info.templateId })
      -- --timeout 5m: a five-minute lease (E2B's CLI counts seconds; units are accepted)
      local function secs(ts)
        local y, mo, d, h, mi, sec = tostring(ts):match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
        return os.time{ year = y, month = mo, day = d, hour = h, min = mi, sec = sec }
      end
      local lease = secs(info.endAt) - secs(info.startedAt)
      assert.is_true(lease >= 295 and lease <= 305, ("a 5-minute lease, got %s s (%s → %s)"):format(lease, info.startedAt, info.endAt))
      local sb = mb.run(function() return assert(client:connect(made, { timeoutMs = 60000 })) end)
      assert.are.equal(made, sb.sandboxId)
      -- the sandbox's env var, read by a later run that connects to it
      local dir = os.tmpname()
      local f = assert(io.open(dir, "w"))
      f:write(('plugin "e2b" { sandboxId = %q }\nplugin "subprocess" {}\n'):format(made)) f:close()
      local script = dir .. ".lua"
      f = assert(io.open(script, "w"))
      f:write([[local h = assert(ctx.subprocess:spawn{ argv = { "sh", "-c", "printf %s \"$GREETING\"" }, cwd = "/",
        graceMs = 1000, stdio = { stdin = "ignore", stdout = { maxBytes = 100 }, stderr = { maxBytes = 100 } } })
        assert(h:wait(30000)); io.write(h.collected.stdout:readFrom(0).text)]]) f:close()
      code, out, err = moonbox(("run %s %s"):format(q(dir), q(script)))
      os.remove(dir) os.remove(script)
      assert.are.same({ 0, "hi" }, { code, out }, err)
      code, out, err = moonbox("sandbox create --template nosuchtemplate")
      assert.are.same({ 1, "" }, { code, out })
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("nosuchtemplate", 1, true), err)
    end)
    mb.run(function() client:kill(made) end)
    assert(ok, perr)
    code, out = moonbox("sandbox create")
    assert.are.equal(0, code)
    local plain = out:match("^(%S+)\n$")
    assert.truthy(plain, out)
    mb.run(function() assert.is_true(client:kill(plain)) end)
  end)

  it("an unknown id is one line naming it and exit 1", function()
    for _, cmd in ipairs({ "info", "pause", "resume", "kill", "host" }) do
      local code, out, err = moonbox("sandbox " .. cmd .. " nosuchsandbox" .. (cmd == "host" and " 80" or ""))
      assert.are.equal(1, code, cmd)
      assert.are.equal("", out)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("E2B_NOT_FOUND", 1, true) and err:find("nosuchsandbox", 1, true), err)
    end
  end)

  it("a usage mistake prints the usage and exits 2, before any request", function()
    for _, args in ipairs({ "sandbox", "sandbox frob", "sandbox info", "sandbox info a b", "sandbox host x 70000",
        "sandbox list --state gone", "sandbox list --limit 0", "sandbox resume x --timeout -1", "sandbox info 'a/b'",
        "sandbox list --metadata nokv", "sandbox create --env X", "sandbox create --timeout 0", "sandbox create --timeout 5x", "sandbox create --timeout 1e3", "sandbox create extra",
        "sandbox create --template ''" }) do
      -- an unreachable endpoint: a request would fail with exit 1, not 2
      local code, _, err = moonbox(args, "E2B_API_URL=http://127.0.0.1:1 E2B_SANDBOX_URL=http://127.0.0.1:1")
      assert.are.equal(2, code, args .. ": " .. err)
      assert.truthy(err:find("^moonbox: sandbox"), err)
      assert.truthy(err:find("usage: moonbox", 1, true), err)
    end
  end)

  it("names the missing endpoint, and a wrong key", function()
    local code, _, err = moonbox("sandbox list", "env -u E2B_API_KEY -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_DOMAIN")
    assert.are.equal(1, code)
    assert.truthy(err:find("E2B_CONFIG", 1, true), err)
    code, _, err = moonbox("sandbox list", "E2B_API_KEY=e2b_" .. ("1"):rep(40))
    assert.are.equal(1, code)
    assert.is_true(one_line(err), err)
    assert.truthy(err:find("E2B_UNAUTHORIZED", 1, true), err)
  end)
end)
