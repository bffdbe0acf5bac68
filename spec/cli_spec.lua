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

  it("--help and -h print the usage and exit 0", function()
    for _, flag in ipairs({ "--help", "-h" }) do
      local code, out = moonbox(flag)
      assert.are.equal(0, code)
      assert.truthy(out:find("usage: moonbox", 1, true))
      assert.truthy(out:find("moonbox policy env", 1, true))
      assert.truthy(out:match("Lua modules: /"), out)
    end
  end)

  it("--version prints the version", function()
    local code, out = moonbox("--version")
    assert.are.equal(0, code)
    assert.are.equal("moonbox " .. require("moonbox.core").version .. "\n", out)
  end)

  local usage = {
    { "no arguments", "" },
    { "an unknown option", "--frobnicate" },
    { "an unknown option of run", "run --frobnicate c.lua s.lua" },
    { "run without a script", "run c.lua" },
    { "an unknown policy subcommand", "policy frob" },
    { "--policy with an unknown concern", "policy env --policy envv=x.lua" },
    { "--policy without a concern", "dump-config --policy x.lua c.lua" },
    { "--env-file with --from-host", "policy env --env-file x --from-host" },
    { "--set without =", "policy env --set NAME" },
  }
  for _, c in ipairs(usage) do
    it("prints the usage and exits 2 for " .. c[1], function()
      local code, out, err = moonbox(c[2])
      assert.are.equal(2, code, err)
      assert.are.equal("", out)
      assert.truthy(err:match("^moonbox: [^\n]+\nusage: moonbox"), err)
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
