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
    -- the same words as pause's for a sandbox already in that state
    code, out = moonbox("sandbox resume " .. id)
    assert.are.same({ 0, id .. " was already running\n" }, { code, out })
    code, out = moonbox("sandbox resume " .. id .. " --json")
    assert.are.same({ 0, true }, { code, cjson.decode(out).already })
    code, out = moonbox("sandbox host " .. id .. " 3000")
    assert.are.equal(0, code)
    assert.are.equal(("%s/_sandbox/%s/3000/\n"):format(os.getenv("E2B_SANDBOX_URL"), id), out)
    code, out = moonbox("sandbox kill " .. id)
    assert.are.same({ 0, "killed " .. id .. "\n" }, { code, out })
  end)

  it("cuts its tables to the terminal's width ($COLUMNS), never the JSON", function()
    local code, out = moonbox("sandbox list --metadata cli=spec", "COLUMNS=60")
    assert.are.equal(0, code)
    for l in out:gmatch("[^\n]+") do assert.is_true(utf8.len(l) <= 60, l) end
    assert.truthy(out:find("…", 1, true), out)                         -- the metadata column was cut
    code, out = moonbox("sandbox list --metadata cli=spec", "COLUMNS=400")
    assert.is_nil(out:find("…", 1, true), out)
    code, out = moonbox("sandbox list --metadata cli=spec --json", "COLUMNS=20")
    assert.truthy(#out > 20 and cjson.decode(out), out)
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
    for _, cmd in ipairs({ "info", "pause", "resume", "kill", "host", "metrics", "logs", "snapshot", "network", "exec" }) do
      local code, out, err = moonbox("sandbox " .. cmd .. " nosuchsandbox" .. (cmd == "host" and " 80" or cmd == "network" and " --clear"
        or cmd == "exec" and " -- true" or ""))
      assert.are.equal(1, code, cmd)
      assert.are.equal("", out)
      assert.is_true(one_line(err), err)
      assert.are.equal("moonbox: E2B_NOT_FOUND: sandbox nosuchsandbox not found\n", err, cmd)
    end
  end)

  it("a usage mistake is one line naming it and the command's --help, exit 2, before any request", function()
    for _, args in ipairs({ "sandbox info a b", "sandbox host x 70000",
        "sandbox list --state gone", "sandbox list --limit 0", "sandbox resume x --timeout -1", "sandbox info 'a/b'",
        "sandbox list --metadata nokv", "sandbox create --env X", "sandbox create --timeout 0", "sandbox create --timeout 5x", "sandbox create --timeout 1e3", "sandbox create extra",
        "sandbox create --template ''" }) do
      -- an unreachable endpoint: a request would fail with exit 1, not 2
      local code, out, err = moonbox(args, "E2B_API_URL=http://127.0.0.1:1 E2B_SANDBOX_URL=http://127.0.0.1:1")
      assert.are.same({ 2, "" }, { code, out }, args .. ": " .. err)
      local cmd = args:match("^sandbox %a+")
      assert.truthy(err:find("^moonbox: " .. cmd .. ": [^\n]+; run 'moonbox " .. cmd .. " %-%-help' for usage\n$"), err)
    end
    local function hint(cmd) return ("; run 'moonbox %s --help' for usage\n"):format(cmd) end
    for _, c in ipairs({
      { "sandbox", "moonbox: sandbox: which command? (create, list, info, kill, pause, resume, snapshot, host, metrics, logs, network, exec, connect)" .. hint("sandbox") },
      { "sandbox frob", "moonbox: sandbox: unknown subcommand frob (expected create, list, info, kill, pause, resume, snapshot, host, metrics, logs, network, exec or connect)" .. hint("sandbox") },
      { "sandbox kil x", "moonbox: sandbox: unknown subcommand kil (did you mean kill?)" .. hint("sandbox") },
      { "sandbox create --templat x", "moonbox: sandbox create: unknown option --templat (did you mean --template?)" .. hint("sandbox create") },
      { "sandbox create --timeout 5x", "moonbox: sandbox create: --timeout 5x: expected seconds (300) or a duration with a unit (500ms, 90s, 5m, 1h)" .. hint("sandbox create") },
      { "sandbox info", "moonbox: sandbox info: which sandbox? (moonbox sandbox info ID)" .. hint("sandbox info") },
      { "sandbox list --limit", "moonbox: sandbox list: option --limit needs a value" .. hint("sandbox list") },
      { "sandbox resume x --timeout 1 --timeout 2", "moonbox: sandbox resume: option --timeout given twice" .. hint("sandbox resume") },
      { "sandbox kill", "moonbox: sandbox kill: which sandbox? give ID... or --all" .. hint("sandbox kill") },
      { "sandbox kill x --all", "moonbox: sandbox kill: give sandbox ids or --all, not both" .. hint("sandbox kill") },
      { "sandbox kill --metadata a=b", "moonbox: sandbox kill: --metadata selects what --all kills: give --all too" .. hint("sandbox kill") },
      { "sandbox kill --all --metadata ab", "moonbox: sandbox kill: --metadata ab: expected KEY=VALUE" .. hint("sandbox kill") },
      { "sandbox snapshot", "moonbox: sandbox snapshot: which sandbox? (moonbox sandbox snapshot ID)" .. hint("sandbox snapshot") },
      { "sandbox snapshot delete", "moonbox: sandbox snapshot delete: which snapshot? (moonbox sandbox snapshot delete SNAPSHOT...)" .. hint("sandbox snapshot delete") },
      { "sandbox snapshot list x", "moonbox: sandbox snapshot list: unexpected argument x" .. hint("sandbox snapshot list") },
      { "sandbox snapshot list --sandbx x", "moonbox: sandbox snapshot list: unknown option --sandbx (did you mean --sandbox?)" .. hint("sandbox snapshot list") },
      { "sandbox exec", "moonbox: sandbox exec: which sandbox? (moonbox sandbox exec ID -- CMD [ARGS...])" .. hint("sandbox exec") },
      { "sandbox exec -- ls", "moonbox: sandbox exec: which sandbox? (moonbox sandbox exec ID -- CMD [ARGS...])" .. hint("sandbox exec") },
      { "sandbox exec x1", "moonbox: sandbox exec: which command? (moonbox sandbox exec ID -- CMD [ARGS...])" .. hint("sandbox exec") },
      { "sandbox exec x1 --", "moonbox: sandbox exec: which command? (moonbox sandbox exec ID -- CMD [ARGS...])" .. hint("sandbox exec") },
      { "sandbox exec 'a/b' -- ls", 'moonbox: sandbox exec: "a/b" is not a sandbox id' .. hint("sandbox exec") },
      { "sandbox exec x1 -x -- ls", "moonbox: sandbox exec: unknown option -x" .. hint("sandbox exec") },
      { "sandbox exec x1 -c '' -- ls", "moonbox: sandbox exec: -c/--cwd must not be empty" .. hint("sandbox exec") },
      { "sandbox exec x1 -u '' -- ls", "moonbox: sandbox exec: -u/--user must not be empty" .. hint("sandbox exec") },
      { "sandbox exec -b x1 --background -- ls", "moonbox: sandbox exec: option -b/--background given twice" .. hint("sandbox exec") },
      { "sandbox exec x1 -e X -- ls", "moonbox: sandbox exec: -e X: expected KEY=VALUE" .. hint("sandbox exec") },
      { "sandbox exec x1 -c", "moonbox: sandbox exec: option -c needs a value" .. hint("sandbox exec") },
    }) do
      local code, out, err = moonbox(c[1], "E2B_API_URL=http://127.0.0.1:1 E2B_SANDBOX_URL=http://127.0.0.1:1")
      assert.are.same({ 2, "", c[2] }, { code, out, err }, c[1])
    end
  end)

  -- `killed ID` lines → set of ids
  local function killed(out)
    local set = {}
    for k in out:gmatch("killed (%S+)\n") do set[k] = true end
    return set
  end
  local function state(sid)
    return mb.run(function()
      local it, err = client:info(sid)
      if it then return it.state end
      return err.code
    end)
  end

  it("kill --all --metadata kills exactly the sandboxes whose metadata match every pair", function()
    local tag = ("k%d%d"):format(os.time(), math.random(1000000))
    local made = {}
    local ok, perr = pcall(function()
      for k, group in ipairs({ "a", "a", "b" }) do
        local code, out, err = moonbox(("sandbox create --metadata kill=%s --metadata group=%s --metadata n=%d"):format(tag, group, k))
        assert.are.equal(0, code, err)
        made[k] = out:match("^(%S+)\n$")
      end
      -- both pairs must match: group=a of this tag (not group=a elsewhere, not this tag's group b)
      local code, out, err = moonbox(("sandbox kill --all --metadata kill=%s --metadata group=a"):format(tag))
      assert.are.equal(0, code, err)
      assert.are.same({ [made[1]] = true, [made[2]] = true }, killed(out))
      assert.are.equal(2, select(2, out:gsub("\n", "")), out)
      assert.are.same({ "E2B_NOT_FOUND", "E2B_NOT_FOUND", "running", "running" },
        { state(made[1]), state(made[2]), state(made[3]), state(id) })
      code, out = moonbox(("sandbox kill --all --metadata group=a --metadata kill=%s"):format(tag))
      assert.are.same({ 0, "no sandbox has that metadata: nothing killed\n" }, { code, out })
      code, out = moonbox(("sandbox kill --metadata kill=%s --all"):format(tag))
      assert.are.same({ 0, "killed " .. made[3] .. "\n" }, { code, out })
      assert.are.same({ "E2B_NOT_FOUND", "running" }, { state(made[3]), state(id) })
    end)
    mb.run(function() for _, m in pairs(made) do client:kill(m) end end)
    assert(ok, perr)
  end)

  it("kill --all kills every sandbox of the endpoint's key, and only those", function()
    local H = require "support.helpers"
    local d = H.start_sandboxd()
    local env = ("E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=%s"):format(d.url, d.url, d.key)
    local ok, perr = pcall(function()
      local made = {}
      for k = 1, 3 do
        local code, out, err = moonbox("sandbox create --metadata n=" .. k, env)
        assert.are.equal(0, code, err)
        made[out:match("^(%S+)\n$")] = true
      end
      local code, out, err = moonbox("sandbox kill --all", env)
      assert.are.equal(0, code, err)
      assert.are.same(made, killed(out))
      code, out = moonbox("sandbox list --json", env)
      assert.are.same({ 0, "[]\n" }, { code, out })
      code, out = moonbox("sandbox kill --all", env)
      assert.are.same({ 0, "no sandboxes: nothing killed\n" }, { code, out })
      assert.are.equal("running", state(id))        -- the suite's endpoint: untouched
    end)
    H.stop_sandboxd(d)
    assert(ok, perr)
  end)

  it("snapshot list shows a sandbox's snapshots; snapshot delete deletes one by name or id", function()
    local name = ("cli-snap-%d%d"):format(os.time(), math.random(1000000))
    local code, out, err = moonbox(("sandbox snapshot %s --name %s --json"):format(id, name))
    assert.are.equal(0, code, err)
    local snap = cjson.decode(out).snapshotId
    local ok, perr = pcall(function()
      local function listed(args)
        local c, o, e = moonbox("sandbox snapshot list --json" .. (args or ""))
        assert.are.equal(0, c, e)
        for _, x in ipairs(cjson.decode(o)) do
          if x.snapshotId == snap then return x end
        end
      end
      assert.are.same({ snapshotId = snap, names = { name } }, listed())
      assert.are.same({ snapshotId = snap, names = { name } }, listed(" --sandbox " .. id))
      code, out = moonbox("sandbox snapshot list --sandbox " .. id)
      assert.are.equal(0, code)
      assert.truthy(out:find("^SNAPSHOT ID +NAMES\n"), out)
      assert.truthy(out:find("\n" .. snap:gsub("%p", "%%%0") .. " +" .. name:gsub("%p", "%%%0") .. "\n"), out)
      -- a sandbox starts from it (E2B lists snapshots as templates)
      code, out = moonbox("sandbox create --template " .. name)
      assert.are.equal(0, code)
      mb.run(function() client:kill(out:match("^(%S+)")) end)
      code, out = moonbox("sandbox snapshot delete " .. name)
      assert.are.same({ 0, "deleted snapshot " .. name .. "\n" }, { code, out })
      assert.is_nil(listed())
      code, out, err = moonbox("sandbox snapshot delete " .. snap)
      assert.are.same({ 1, "", "moonbox: E2B_NOT_FOUND: snapshot " .. snap .. " not found\n" }, { code, out, err })
    end)
    mb.run(function() client:deleteSnapshot(snap) end)
    assert(ok, perr)
  end)

  it("logs prints what happened to a sandbox and the processes it ran; --json one object a line; -f follows until it is gone", function()
    assert.are.same({ 3, "hi\n", "" }, { cli.moonbox("sandbox exec " .. id .. [[ -- sh -c 'echo hi; exit 3']], { stdin_null = true }) })
    assert.are.equal(0, (moonbox("sandbox pause " .. id)))
    assert.are.equal(0, (moonbox("sandbox resume " .. id .. " --timeout 90")))
    local code, out = moonbox("sandbox logs " .. id)
    assert.are.equal(0, code)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l:gsub("^%S+ ", "") end   -- without the time
    assert.are.same({ "info  sandbox created template=base",
      "info  process started cmd=sh -c echo hi; exit 3 pid=" .. lines[2]:match("pid=(%d+)"),
      "warn  process ended cmd=sh -c echo hi; exit 3 pid=" .. lines[2]:match("pid=(%d+)") .. " status=exit status 3",
      "info  sandbox paused", "info  sandbox resumed seconds=90" }, lines)
    assert.truthy(out:find("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ "), out)
    code, out = moonbox("sandbox logs --json " .. id)
    assert.are.equal(0, code)
    local first = cjson.decode(out:match("^[^\n]+"))
    assert.are.same({ "info", "sandbox created", { template = "base" } }, { first.level, first.message, first.fields })
    -- following: a process started meanwhile shows up, and the sandbox's end ends the command
    local f = os.tmpname()
    local h = io.popen(cli.q(cli.bin) .. " sandbox logs -f " .. id .. " > " .. f .. " 2>&1; echo $? >> " .. f, "w")
    mb.run(function()
      mb.sleep(1200)
      assert.are.equal(0, (cli.moonbox("sandbox exec " .. id .. " -- echo later", { stdin_null = true })))
      mb.sleep(1200)
    end)
    assert.are.equal(0, (moonbox("sandbox kill " .. id)))
    h:close()
    local got = cli.read(f)
    os.remove(f)
    assert.truthy(got:find("process started cmd=echo later", 1, true), got)
    assert.truthy(got:find("moonbox: sandbox " .. id .. " is gone\n0\n$"), got)
  end)

  describe("exec", function()
    local function exec(args, o)
      o = o or {}
      return cli.moonbox("sandbox exec " .. args, { stdin = o.stdin, stdin_null = not o.stdin })
    end

    it("streams stdout and stderr apart and exits with the command's status", function()
      local code, out, err = exec(id .. [[ -- sh -c 'echo to-out; echo to-err >&2; exit 7']])
      assert.are.same({ 7, "to-out\n", "to-err\n" }, { code, out, err })
      code, out, err = exec(id .. " -- true")
      assert.are.same({ 0, "", "" }, { code, out, err })
      -- no `--`: the command is the first argument after the id that is not an option; its own
      -- options (and --help) after it are its own
      code, out = exec(id .. " echo -n --help")
      assert.are.same({ 0, "--help" }, { code, out })
      -- killed by a signal: 128 + its number, as a shell says
      code = exec(id .. [[ -- sh -c 'kill -9 $$']])
      assert.are.equal(137, code)
      code = exec(id .. [[ -- sh -c 'kill -TERM $$']])
      assert.are.equal(143, code)
    end)

    it("passes its stdin to the command until EOF", function()
      local f = os.tmpname()
      local data = {}
      for k = 1, 20000 do data[k] = ("line %d of the input\n"):format(k) end
      data = table.concat(data)
      cli.write(f, data)
      local code, out, err = exec(id .. " -- cat", { stdin = f })
      assert.are.same({ 0, "" }, { code, err })
      assert.are.equal(#data, #out)
      assert.is_true(out == data)
      -- the command sees the EOF: wc ends and counts the lines
      code, out = exec(id .. " -- wc -l", { stdin = f })
      assert.are.same({ 0, "20000\n" }, { code, out })
      os.remove(f)
      -- an empty stdin is an EOF at once
      code, out = exec(id .. " -- cat")
      assert.are.same({ 0, "" }, { code, out })
    end)

    it("does not wait for stdin when the command ends first", function()
      -- stdin is a pipe whose writer stays for 20 s: the command's end ends the exec
      local dir = cli.tmpdir()
      local t0 = os.time()
      os.execute(("mkfifo %s/in && { sleep 20 >%s/in & echo $! >%s/pid; } && %s sandbox exec %s -- sh -c 'exit 3' <%s/in >%s/out; "
        .. "echo $? >>%s/out; kill $(cat %s/pid)"):format(q(dir), q(dir), q(dir), q(cli.bin), id, q(dir), q(dir), q(dir), q(dir)))
      assert.is_true(os.time() - t0 < 15, "exec waited for its stdin's EOF")
      assert.are.equal("3\n", cli.read(dir .. "/out"))
      os.execute("rm -rf " .. q(dir))
    end)

    it("honours -c, -u and -e (and their long names)", function()
      local code, out, err = exec(id .. [[ -c /tmp -u root -e GREETING=hi -e OTHER=a=b -- sh -c 'pwd; id -un; echo "$GREETING $OTHER"']])
      assert.are.same({ 0, "/tmp\nroot\nhi a=b\n" }, { code, out }, err)
      code, out, err = exec("--cwd / " .. id .. [[ --user user --env GREETING=yo -- sh -c 'pwd; id -un; echo "$GREETING"']])
      assert.are.same({ 0, "/\nuser\nyo\n" }, { code, out }, err)
      -- the defaults: the sandbox's default user, in its home
      code, out = exec(id .. " -- sh -c 'id -un; pwd'")
      assert.are.same({ 0, "user\n/home/user\n" }, { code, out })
    end)

    it("-b starts the command in the background and prints its pid", function()
      local code, out, err = exec(id .. " -b -- sh -c 'sleep 2; echo done > /tmp/bg-done; sleep 60'")
      assert.are.equal(0, code, err)
      local pid = out:match("^(%d+)\n$")
      assert.truthy(pid, out)
      -- it runs after the CLI is gone, as that pid
      code = exec(id .. " -- kill -0 " .. pid)
      assert.are.equal(0, code)
      code, out = exec(id .. [[ -- sh -c 'for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /tmp/bg-done ] && break; sleep 0.5; done; cat /tmp/bg-done']])
      assert.are.same({ 0, "done\n" }, { code, out })
      code = exec(id .. " -- kill " .. pid)
      assert.are.equal(0, code)
    end)

    it("errors are one line and exit 1: no such sandbox, a paused one, a program that cannot start", function()
      local code, out, err = exec("nosuchsandbox -- true")
      assert.are.same({ 1, "" }, { code, out })
      assert.is_true(one_line(err), err)
      assert.are.equal("moonbox: E2B_NOT_FOUND: sandbox nosuchsandbox not found\n", err)
      code, out, err = exec(id .. " -- /no/such/program")
      assert.are.same({ 1, "" }, { code, out })
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("/no/such/program", 1, true), err)
      mb.run(function() assert.is_true(client:pause(id)) end)
      code, out, err = exec(id .. " -- true")
      assert.are.same({ 1, "", ("moonbox: E2B_PAUSED: sandbox %s is paused: resume it first (moonbox sandbox resume %s)\n"):format(id, id) },
        { code, out, err })
    end)
  end)

  it("names the missing endpoint, and a wrong key", function()
    -- nothing set, and the background sandboxd (spec/cli_sandboxd_spec.lua) neither running nor to be started
    local xdg = cli.tmpdir()
    local code, _, err = moonbox("sandbox list", "env -u E2B_API_KEY -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_DOMAIN "
      .. "MOONBOX_SANDBOXD_AUTOSTART=0 XDG_RUNTIME_DIR=" .. q(xdg))
    os.execute("rm -rf " .. q(xdg))
    assert.are.equal(1, code)
    assert.truthy(err:find("E2B_CONFIG", 1, true), err)
    assert.truthy(err:find("moonbox sandboxd start", 1, true), err)
    code, _, err = moonbox("sandbox list", "E2B_API_KEY=e2b_" .. ("1"):rep(40))
    assert.are.equal(1, code)
    assert.is_true(one_line(err), err)
    assert.truthy(err:find("E2B_UNAUTHORIZED", 1, true), err)
  end)
end)
