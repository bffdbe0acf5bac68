-- The moonbox program as a Unix tool: help, version, usage errors, inputs checked before any
-- sandbox starts, tracebacks only for bugs, and the `policy` commands (which start no sandbox).

local cli = require "support.cli"
local bin = cli.bin
local tmpdir, write, q = cli.tmpdir, cli.write, cli.q

-- → exit status, stdout, stderr (no E2B_* variables: nothing here may reach a sandbox)
local function moonbox(args, dir) return cli.moonbox(args, { dir = dir or ".", prefix = cli.NO_E2B }) end

local function one_line(s) return select(2, s:gsub("\n", "")) == 1 and s:sub(-1) == "\n" end

describe("the moonbox command line", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  it("--help and -h print the overview and exit 0", function()
    for _, flag in ipairs({ "--help", "-h" }) do
      local code, out, err = moonbox(flag)
      assert.are.same({ 0, "" }, { code, err })
      assert.truthy(out:find("^usage: moonbox %[%-%-trace%] SCRIPT%.lua"), out)
      for _, cmd in ipairs({ "moonbox policy env", "moonbox sync push", "moonbox sandbox create", "moonbox sandbox exec ID",
          "moonbox sandbox kill ID... | --all", "moonbox sandbox snapshot list", "moonbox secret set", "moonbox sandboxd start",
          "moonbox sandboxd status [--json]", "moonbox sandboxd [OPTIONS...]" }) do
        assert.truthy(out:find("\n       " .. cmd, 1, true), cmd)
      end
      assert.truthy(out:match("Lua modules: /"), out)
    end
  end)

  -- Every command and group answers --help and -h with its own usage on stdout.
  local commands = { "run", "dump-config", "policy env", "policy timeouts", "policy check", "policy network",
    "sync push", "sync pull", "sync diff", "sandbox create", "sandbox list", "sandbox info", "sandbox kill",
    "sandbox pause", "sandbox resume", "sandbox snapshot", "sandbox snapshot list", "sandbox snapshot delete",
    "sandbox host", "sandbox metrics", "sandbox network", "sandbox exec", "secret set", "secret list", "secret info",
    "secret delete", "sandboxd start", "sandboxd stop", "sandboxd status" }
  it("--help and -h on every command print its own usage, arguments and options, exit 0", function()
    for _, cmd in ipairs(commands) do
      for _, flag in ipairs({ "--help", "-h" }) do
        local code, out, err = moonbox(cmd .. " " .. flag)
        assert.are.same({ 0, "" }, { code, err }, cmd .. " " .. flag)
        assert.truthy(out:find("^usage: moonbox " .. cmd:gsub("%-", "%%-") .. "[ \n]"), cmd .. ": " .. out)
        local about = out:match("^.-\n\n([^\n]+)\n")
        assert.truthy(about and about:match("^%u.*%.$"), cmd .. ": a one-line description: " .. out)
        assert.truthy(out:find("\nOptions:\n", 1, true), cmd .. ": " .. out)
        assert.truthy(out:find("\n  -h, --help ", 1, true), cmd .. ": " .. out)
        assert.is_nil(out:find("moonbox dump-config", 1, true) and cmd ~= "dump-config" or nil, cmd .. ": only its own usage")
      end
    end
    -- the options a command takes are listed
    local _, out = moonbox("sandbox exec --help")
    for _, o in ipairs({ "-b, --background", "-c, --cwd CWD", "-u, --user USER", "-e, --env K=V" }) do
      assert.truthy(out:find("\n  " .. o, 1, true), o)
    end
    _, out = moonbox("sandbox kill -h")
    assert.truthy(out:find("\n  --all ", 1, true) and out:find("\n  --metadata K=V ", 1, true), out)
    -- anywhere among a command's options, before any sandbox is asked
    local code
    code, out = moonbox("sandbox create --metadata a=b --help")
    assert.are.equal(0, code)
    assert.truthy(out:find("^usage: moonbox sandbox create "), out)
  end)

  it("--help on a group lists its commands with their descriptions", function()
    for group, subs in pairs({ sandbox = { "create", "exec", "connect", "kill", "snapshot" }, secret = { "set", "delete" },
        policy = { "env", "network" }, sync = { "push", "diff" }, sandboxd = { "start", "stop", "status" } }) do
      for _, args in ipairs({ group .. " --help", group .. " -h", group .. " help" }) do
        local code, out, err = moonbox(args)
        assert.are.same({ 0, "" }, { code, err }, args)
        assert.truthy(out:find("^usage: moonbox " .. group .. " COMMAND %[ARGS%.%.%.%]\n"), out)
        for _, sub in ipairs(subs) do assert.truthy(out:match("\n  " .. sub .. " +%u[^\n]+\n"), args .. ": " .. sub) end
        assert.truthy(out:find(("run 'moonbox %s COMMAND --help' for a command's usage\n"):format(group), 1, true), out)
      end
    end
  end)

  it("--version prints the version", function()
    local code, out = moonbox("--version")
    assert.are.equal(0, code)
    assert.are.equal("moonbox " .. require("moonbox.core").version .. "\n", out)
  end)

  -- A usage mistake is one line naming it and the command's --help, exit status 2, nothing on stdout.
  local function hint(cmd) return ("; run 'moonbox %s--help' for usage\n"):format(cmd and (cmd .. " ") or "") end
  local usage = {
    { "no arguments", "", "moonbox: no command given (a SCRIPT.lua, or run, dump-config, policy, sync, sandbox, secret, template, sandboxd)" .. hint() },
    { "an unknown option", "--frobnicate", "moonbox: unknown option --frobnicate" .. hint() },
    { "an unknown option of run", "run --frobnicate c.lua s.lua", "moonbox: run: unknown option --frobnicate" .. hint("run") },
    { "a misspelt option", "policy env --jsn", "moonbox: policy env: unknown option --jsn (did you mean --json?)" .. hint("policy env") },
    { "run without a script", "run c.lua", "moonbox: run: expected COMPOSE.lua SCRIPT.lua [ARGS...]" .. hint("run") },
    { "a missing option value", "policy timeouts --compose", "moonbox: policy timeouts: option --compose needs a value" .. hint("policy timeouts") },
    { "a flag given a value", "policy env --json=1", "moonbox: policy env: option --json takes no value" .. hint("policy env") },
    { "a missing argument", "policy check", "moonbox: policy check: which file? (moonbox policy check [CONCERN=]FILE)" .. hint("policy check") },
    { "an extra argument", "dump-config a.lua b.lua", "moonbox: dump-config: expected one COMPOSE.lua" .. hint("dump-config") },
    { "no policy subcommand", "policy", "moonbox: policy: which command? (env, timeouts, check, network)" .. hint("policy") },
    { "an unknown policy subcommand", "policy frob", "moonbox: policy: unknown subcommand frob (expected env, timeouts, check or network)" .. hint("policy") },
    { "a misspelt policy subcommand", "policy chek", "moonbox: policy: unknown subcommand chek (did you mean check?)" .. hint("policy") },
    { "a misspelt sync subcommand", "sync psh", "moonbox: sync: unknown subcommand psh (did you mean push?)" .. hint("sync") },
    { "a misspelt sandbox subcommand", "sandbox lst", "moonbox: sandbox: unknown subcommand lst (did you mean list?)" .. hint("sandbox") },
    { "a misspelt secret subcommand", "secret delte x", "moonbox: secret: unknown subcommand delte (did you mean delete?)" .. hint("secret") },
    { "a bad value", "sync push --compose c.lua --max-files 0 a b", "moonbox: sync push: --max-files must be a positive integer" .. hint("sync push") },
    { "--policy with an unknown concern", "policy env --policy envv=x.lua",
      'moonbox: --policy envv=x.lua: unknown concern "envv" (expected env, lifecycle, timeouts, composition or network)' .. hint("policy env") },
    { "--env-file with --from-host", "policy env --env-file x --from-host", "moonbox: policy env: give --env-file or --from-host, not both" .. hint("policy env") },
    { "--set without =", "policy env --set NAME", "moonbox: --set NAME: expected NAME=VALUE (use --unset NAME to delete a name)" .. hint("policy env") },
  }
  for _, c in ipairs(usage) do
    it("is one line naming the mistake and exit 2 for " .. c[1], function()
      local code, out, err = moonbox(c[2])
      assert.are.same({ 2, "", c[3] }, { code, out, err })
    end)
  end

  it("gives a script `arg` as a stock lua5.4 does: the script at 0, its arguments, the command before it", function()
    write(dir .. "/a.lua", 'local t = {} for i = -3, #arg do t[#t + 1] = i .. "=" .. tostring(arg[i]) end print(table.concat(t, " "))\n')
    local code, out, err = moonbox("a.lua x 'y z'", dir)
    assert.are.equal(0, code, err)
    local exe = out:match("%-1=(%S+)")
    assert.truthy(exe and exe:match("/moonbox$"), out)
    assert.are.equal(("-3=nil -2=nil -1=%s 0=a.lua 1=x 2=y z\n"):format(exe), out)
    write(dir .. "/c.lua", 'plugin "fs-local" { cwd = "/tmp" }\n')
    code, out, err = moonbox("run c.lua a.lua x", dir)
    assert.are.equal(0, code, err)
    assert.are.equal(("-3=%s -2=run -1=c.lua 0=a.lua 1=x\n"):format(exe), out)
  end)

  it("names the unknown concern and what was expected", function()
    local _, _, err = moonbox("run --policy envv=x.lua c.lua s.lua")
    assert.truthy(err:find('moonbox: --policy envv=x.lua: unknown concern "envv" (expected env, lifecycle, timeouts, composition or network)', 1, true), err)
  end)

  it("refuses a missing composition or script in one line, before anything starts", function()
    write(dir .. "/c.lua", 'plugin "e2b" {}\n')
    for _, args in ipairs({ "run nope.lua s.lua", "run c.lua /nonexistent.lua", "/nonexistent.lua", "dump-config nope.lua" }) do
      local code, out, err = moonbox(args, dir)
      assert.are.equal(1, code, args)
      assert.are.equal("", out)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("No such file or directory", 1, true), err)
      assert.is_nil(err:find("traceback", 1, true))
    end
  end)

  it("a script with a syntax error is one line naming file:line", function()
    write(dir .. "/c.lua", 'plugin "e2b" {}\n')
    write(dir .. "/s.lua", "local x = \n")
    local code, _, err = moonbox("run c.lua s.lua", dir)
    assert.are.equal(1, code)
    assert.is_true(one_line(err), err)
    assert.truthy(err:find("s.lua:2:", 1, true), err)
  end)

  it("an operational error from a script is one line; --trace adds where it was raised", function()
    write(dir .. "/s.lua", "local mb = require 'moonbox'\nassert(nil, mb.error('FS_NOT_FOUND', 'no such file: /x'))\n")
    local code, _, err = moonbox("s.lua", dir)
    assert.are.equal(1, code)
    assert.are.equal("moonbox: FS_NOT_FOUND: no such file: /x\n", err)
    code, _, err = moonbox("--trace s.lua", dir)
    assert.are.equal(1, code)
    assert.truthy(err:find("moonbox: FS_NOT_FOUND: no such file: /x\n", 1, true), err)
    assert.truthy(err:find("stack traceback", 1, true), err)
  end)

  it("a bug in a script (a raised string) prints its traceback", function()
    write(dir .. "/s.lua", "local t = nil\nreturn t.field\n")
    local code, _, err = moonbox("s.lua", dir)
    assert.are.equal(1, code)
    assert.truthy(err:find("s.lua:2: attempt to index a nil value", 1, true), err)
    assert.truthy(err:find("stack traceback", 1, true), err)
  end)

  it("a script's integer result is the exit status", function()
    write(dir .. "/s.lua", "return 7\n")
    assert.are.equal(7, (moonbox("s.lua", dir)))
  end)

  -- Bad policy input through every command: exit non-zero, one line, file:line and field.
  local bad = {
    { "a syntax error", "return { drop_prefixes = {\"AWS_\"}\n", "p.lua:2: '}' expected" },
    { "a runtime error", "error('no policy today')\n", "p.lua:1: no policy today" },
    { "an unknown field", "return {\n  drop_prefixs = {} }\n", "p.lua:2: env policy: unknown field drop_prefixs (expected one of" },
    { "a wrong type", "return { drop_prefixes = \"AWS_\" }\n", "p.lua:1: env policy: field drop_prefixes: expected a list of a non-empty name prefix, got string \"AWS_\"" },
    { "a pattern that does not compile", "return { drop_patterns = { \"(AWS\" } }\n", "p.lua:1: env policy: field drop_patterns[1]: expected a Lua pattern: \"(AWS\" is not a Lua pattern: unfinished capture" },
    { "a name with =", "return { drop_names = { \"A=B\" } }\n", "p.lua:1: env policy: field drop_names[1]: expected an environment variable name (no '=', no NUL, no leading '-'): \"A=B\" contains '='" },
    { "a name with NUL", "return { drop_names = { \"A\\0B\" } }\n", "p.lua:1: env policy: field drop_names[1]: expected an environment variable name (no '=', no NUL, no leading '-'): \"A\\0B\" contains NUL" },
  }
  for _, c in ipairs(bad) do
    it("rejects a policy file with " .. c[1] .. " in every command", function()
      write(dir .. "/p.lua", c[2])
      write(dir .. "/c.lua", 'plugin "e2b" {}\n')
      write(dir .. "/s.lua", "error('the script must not run')\n")
      for _, args in ipairs({ "policy env --policy env=p.lua", "policy timeouts --policy env=p.lua",
          "policy check env=p.lua", "dump-config --policy env=p.lua c.lua", "run --policy env=p.lua c.lua s.lua" }) do
        local code, out, err = moonbox(args, dir)
        assert.are.equal(1, code, args .. ": " .. err)
        assert.is_true(one_line(err), args .. ": " .. err)
        assert.truthy(err:find(c[3], 1, true), args .. ": " .. err)
        assert.is_nil(err:find("the script must not run", 1, true))
        assert.is_nil(out:find("dispose order", 1, true))
      end
    end)
  end

  it("rejects a composition naming a missing policy file, naming the composition's line", function()
    write(dir .. "/c.lua", 'plugin "e2b" {}\n\npolicies { env = "./strict-env.lua" }\n')
    write(dir .. "/s.lua", "error('the script must not run')\n")
    for _, args in ipairs({ "run c.lua s.lua", "dump-config c.lua", "policy env --compose c.lua" }) do
      local code, _, err = moonbox(args, dir)
      assert.are.equal(1, code, args)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("c.lua:3: cannot read ", 1, true), err)
      assert.truthy(err:find("strict-env.lua: No such file or directory", 1, true), err)
    end
  end)

  describe("policy env", function()
    before_each(function()
      write(dir .. "/strict-env.lua", 'return {\n  keep_names = { "KEYBOARD" },\n  drop_patterns = { "^AWS_" },\n}\n')
      write(dir .. "/sandbox.env", "# a sandbox's login environment\nPATH=/usr/bin:/bin\nHOME=/home/user\nLANG=C.UTF-8\n"
        .. "KEYBOARD=us\nAWS_REGION=eu-west-1\nDSH_SESSION=42\nGH_TOKEN=ghp_x\n")
    end)

    it("says what happens to each name and which rule decided, then the final environment", function()
      local code, out, err = moonbox("policy env --policy env=strict-env.lua --env-file sandbox.env --set DEBUG=1 "
        .. "--set PATH=/opt/bin --unset LANG", dir)
      assert.are.equal(0, code, err)
      local lines = {}
      for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
      local function line(name) for _, l in ipairs(lines) do if l:match("^" .. name .. " ") then return l end end end
      assert.truthy(line("AWS_REGION"):match("dropped +by pattern %^AWS_ %(strict%-env%.lua:3%)$"), line("AWS_REGION"))
      assert.truthy(line("DSH_SESSION"):match("dropped +by prefix DSH_ %(.*policies/env%.lua:%d+%)$"), line("DSH_SESSION"))
      assert.truthy(line("GH_TOKEN"):match("dropped +by word TOKEN %(.*policies/env%.lua:%d+%)$"), line("GH_TOKEN"))
      assert.truthy(line("KEYBOARD"):match("kept +by name KEYBOARD %(strict%-env%.lua:2%), over word KEY"), line("KEYBOARD"))
      assert.truthy(line("HOME"):match("kept +no rule matched$"), line("HOME"))
      assert.truthy(line("LANG"):match("deleted +tombstone %(%-%-unset LANG%)"), line("LANG"))
      assert.truthy(line("DEBUG"):match("set +explicit entry %(%-%-set DEBUG=1%)"), line("DEBUG"))
      assert.truthy(line("PATH"):match("overridden +explicit entry %(%-%-set PATH=/opt/bin%)"), line("PATH"))
      local tail = "\nthe environment a spawn gets (4 names):\n  DEBUG=1\n  HOME=/home/user\n  KEYBOARD=us\n  PATH=/opt/bin\n"
      assert.are.equal(tail, out:sub(-#tail))
    end)

    it("--json gives the same for scripts", function()
      local code, out = moonbox("policy env --env-file sandbox.env --unset HOME --json", dir)
      assert.are.equal(0, code)
      local r = require("cjson").decode(out)
      local by = {}
      for _, e in ipairs(r.entries) do by[e.name] = e end
      assert.are.equal("dropped", by.GH_TOKEN.verdict); assert.are.equal("word TOKEN", by.GH_TOKEN.rule)
      assert.are.equal("deleted", by.HOME.verdict); assert.are.equal("kept", by.HOME.was.verdict)
      assert.are.equal("kept", by.AWS_REGION.verdict)            -- only strict-env.lua drops it
      assert.are.same({ PATH = "/usr/bin:/bin", LANG = "C.UTF-8", AWS_REGION = "eu-west-1" }, r.env)
    end)

    it("--from-host reads the host's environment; a composition's policies apply with --compose", function()
      write(dir .. "/c.lua", 'plugin "e2b" {}\npolicies { env = "strict-env.lua" }\n')
      local code, out = moonbox("policy env --compose c.lua --from-host --json", dir)
      assert.are.equal(0, code)
      local r = require("cjson").decode(out)
      assert.truthy(r.policy:find("strict-env.lua (c.lua:2)", 1, true), r.policy)
      local by = {}
      for _, e in ipairs(r.entries) do by[e.name] = e end
      assert.are.equal(os.getenv("PATH"), r.env.PATH)
      assert.is_not_nil(by.PATH)
    end)

    it("rejects a malformed --env-file line and a bad --set name", function()
      write(dir .. "/bad.env", "PATH=/bin\nnot an entry\n")
      local code, _, err = moonbox("policy env --env-file bad.env", dir)
      assert.are.equal(1, code)
      assert.are.equal('moonbox: POLICY_INVALID: bad.env:2: expected NAME=VALUE, got "not an entry"\n', err)
      code, _, err = moonbox("policy env --set A-B=1 --set =x", dir)
      assert.are.equal(1, code)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("environment entry has an empty name", 1, true), err)
    end)
  end)

  it("policy timeouts gives every clock with what set it", function()
    write(dir .. "/fast.lua", "return {\n  request_ms = 5000,\n}\n")
    write(dir .. "/c.lua", 'plugin "e2b" { timeoutMs = 60000 }\n')
    local code, out, err = moonbox("policy timeouts --compose c.lua --policy timeouts=fast.lua", dir)
    assert.are.equal(0, code, err)
    assert.truthy(out:match("\nsandbox lease +60000 ms .*%[c%.lua:1 %(plugin \"e2b\" timeoutMs%)%]\n"), out)
    assert.truthy(out:match("\nlease renewal +30000 ms "), out)
    assert.truthy(out:match("\nrequest +5000 ms .*%[fast%.lua:2 %(%-%-policy timeouts=fast%.lua%)%]\n"), out)
    assert.truthy(out:match("\nstream idle +150000 ms .*%[default %(.*policies/timeouts%.lua:%d+%)%]\n"), out)
    assert.truthy(out:match("\ncommand deadline +%- +none"), out)
  end)

  it("policy check validates a file and prints what it changes", function()
    write(dir .. "/strict-env.lua", 'return {\n  drop_prefixes = { "DSH_", "AWS_" },\n}\n')
    local code, out = moonbox("policy check strict-env.lua", dir)
    assert.are.equal(0, code)
    assert.truthy(out:find('strict-env.lua: a valid env policy; against the defaults:\n  drop_prefixes: { "DSH_" } -> { "DSH_", "AWS_" }  [strict-env.lua:2]\n1 field set, 4 left as the defaults\n', 1, true), out)
    write(dir .. "/odd.lua", "return { request_ms = 1, renew = false }\n")
    code, out = moonbox("policy check odd.lua", dir)
    assert.are.equal(1, code)
    code, out = moonbox("policy check timeouts=strict-env.lua", dir)
    assert.are.equal(1, code)
  end)

  it("dump-config prints every policy value and where it came from", function()
    write(dir .. "/strict-env.lua", 'drop_prefixes = { "AWS_" }\n')
    write(dir .. "/fast.lua", "return { request_ms = 5000 }\n")
    write(dir .. "/c.lua", 'plugin "e2b" { apiKey = "e2b_secret" }\npolicies { env = "strict-env.lua" }\n')
    local code, out = moonbox("dump-config --policy timeouts=fast.lua c.lua", dir)
    assert.are.equal(0, code)
    assert.truthy(out:find('\n     drop_prefixes = { "AWS_" }  [strict-env.lua:1 (c.lua:2)]\n', 1, true), out)
    assert.truthy(out:find("\n     request_ms = 5000  [fast.lua:1 (--policy timeouts=fast.lua)]\n", 1, true), out)
    assert.truthy(out:match("\n     create_ms = 120000  %[default %(.-policies/timeouts%.lua:%d+%)%]\n"), out)
    assert.is_nil(out:find("e2b_secret", 1, true))
  end)
end)
