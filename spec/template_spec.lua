-- moonbox.template without a sandbox: the description's checks (every misspelt field and wrong
-- type an error naming it and the file:line), the wire form of steps and ready checks (the
-- commands E2B's SDK sends), template files, and the COPY files hash.
local T = require "moonbox.template"
local cli = require "support.cli"

local function fails(pattern, d, e)
  assert.is_nil(d)
  assert.are.equal("TEMPLATE_INVALID", e and e.code, tostring(e))
  assert.truthy(e.message:find(pattern, 1, true), ("%q not in %q"):format(pattern, e.message))
end

describe("template descriptions", function()
  it("turns steps into E2B's wire steps, in order, with the file:line of each", function()
    local d = assert(T.template{ from = "base", steps = {
      T.run "apt-get install -y jq", T.run { "make", "make install", user = "root", force = true },
      T.copy { "./src/", "/app/src", mode = "755", user = "user" }, T.copy { "a.txt", "/tmp/" },
      T.env { MODE = "prod", A_LEVEL = 3 }, T.workdir "/app", T.user "user" },
      start = { "python3 -m http.server 8000", ready = T.port(8000) }, cpu = 2, memoryMB = 1024 })
    local got = {}
    for i, s in ipairs(d.steps) do got[i] = { s.type, s.args, s.force } end
    assert.are.same({
      { "RUN", { "apt-get install -y jq" }, false },
      { "RUN", { "make && make install", "root" }, true },
      { "COPY", { "src", "/app/src", "user", "0755" }, false },
      { "COPY", { "a.txt", "/tmp/", "", "" }, false },
      { "ENV", { "A_LEVEL", "3", "MODE", "prod" }, false },    -- sorted: one order, one cache key
      { "WORKDIR", { "/app" }, false }, { "USER", { "user" }, false } }, got)
    assert.truthy(d.steps[1].where:match("template_spec%.lua:%d+$"), d.steps[1].where)
    assert.are.same({ "base", "python3 -m http.server 8000", '[ -n "$(ss -Htuln sport = :8000)" ]', 2, 1024 },
      { d.from, d.start, d.ready, d.cpu, d.memoryMB })
    assert.are.equal("COPY src /app/src user 0755", T.describe_step(d.steps[3]))
  end)

  it("defaults to base, takes an image instead, a start command alone, and skipCache", function()
    local d = assert(T.template{})
    assert.are.same({ "base", nil, 0, nil, false }, { d.from, d.image, #d.steps, d.start, d.skipCache })
    d = assert(T.template{ image = "e2bdev/base", start = "sleep infinity", skipCache = true })
    assert.are.same({ nil, "e2bdev/base", "sleep infinity", nil, true }, { d.from, d.image, d.start, d.ready, d.skipCache })
    d = assert(T.template{ start = { "./serve", ready = "test -S /run/s.sock" } })
    assert.are.equal("test -S /run/s.sock", d.ready)
  end)

  it("maps the ready helpers to the commands the SDK's waitFor* send", function()
    local function r(x) return assert(T.template{ start = { "x", ready = x } }).ready end
    assert.are.equal('[ -n "$(ss -Htuln sport = :3000)" ]', r(T.port(3000)))
    assert.are.equal('curl -s -o /dev/null -w "%{http_code}" http://localhost:3000/health | grep -q "200"',
      r(T.url("http://localhost:3000/health")))
    assert.are.equal([[curl -s -o /dev/null -w "%{http_code}" 'http://h/a b'"'"'c' | grep -q "204"]], r(T.url("http://h/a b'c", 204)))
    assert.are.equal("pgrep my-daemon > /dev/null", r(T.process("my-daemon")))
    assert.are.equal("[ -f /tmp/ready ]", r(T.file("/tmp/ready")))
    assert.are.equal("[ -f '/tmp/my file' ]", r(T.file("/tmp/my file")))
    assert.are.equal("sleep 5", r(T.timeout(5000)))
    assert.are.equal("sleep 1", r(T.timeout(10)))
    assert.are.equal("test -e /x", r(T.cmd("test -e /x")))
  end)

  it("names every misspelt field, with the nearest valid name and the caller's line", function()
    local line = debug.getinfo(1, "l").currentline
    local d, e = T.template{ stpes = {} }
    fails("unknown field stpes (expected from, image, steps, start, cpu, memoryMB, skipCache, context; the nearest is steps)", d, e)
    assert.truthy(e.message:find(("template_spec.lua:%d: template:"):format(line + 1), 1, true), e.message)
    fails("unknown field memoryMb", T.template{ memoryMb = 512 })
    fails("unknown field skip_cache", T.template{ skip_cache = true })
    fails("start: unknown field raedy (expected ready; the nearest is ready)", T.template{ start = { "x", raedy = T.port(1) } })
    fails("steps[1] (run): unknown field usr (expected user, force; the nearest is user)", T.template{ steps = { T.run { "x", usr = "root" } } })
    fails("steps[1] (run): unknown field forse", T.template{ steps = { T.run { "x", forse = true } } })
    fails("steps[2] (copy): unknown field mod (expected user, mode, force; the nearest is mode)",
      T.template{ steps = { T.run "x", T.copy { "a", "/b", mod = "755" } } })
    fails("steps[1] (workdir): unknown field force2", T.template{ steps = { T.workdir { "/a", force2 = true } } })
    fails("steps[1] (user): unknown field forc", T.template{ steps = { T.user { "user", forc = true } } })
    -- the step's own line
    line = debug.getinfo(1, "l").currentline
    d, e = T.template{ steps = {
      T.run "fine",
      T.copy { "a", "/b", usr = "x" } } }
    assert.truthy(e.message:find(("template_spec.lua:%d: template: steps[2] (copy)"):format(line + 3), 1, true), e.message)
  end)

  it("refuses wrong types and values, naming them", function()
    fails("expects a table", T.template("base"))
    fails("from must be a non-empty string", T.template{ from = 3 })
    fails("give from (a template) or image, not both", T.template{ from = "base", image = "x" })
    fails("steps must be a list of steps", T.template{ steps = "run x" })
    fails("steps[1] must be a step (run, copy, env, workdir, user), got \"apt-get\"", T.template{ steps = { "apt-get" } })
    fails("steps[2] must be a step", T.template{ steps = { T.run "a", { "b" } } })
    fails("steps: unexpected key \"x\"", T.template{ steps = { x = T.run "a" } })
    fails("steps[1] (run): expects a command", T.template{ steps = { T.run {} } })
    fails("steps[1] (run): [2] must be a string, got 3", T.template{ steps = { T.run { "a", 3 } } })
    fails("steps[1] (run): user must be a user name", T.template{ steps = { T.run { "a", user = "a b" } } })
    fails("steps[1] (run): force must be a boolean", T.template{ steps = { T.run { "a", force = "yes" } } })
    fails("steps[1] (copy): expects { SRC, DEST }", T.template{ steps = { T.copy { "a" } } })
    fails("leaves the template's context directory", T.template{ steps = { T.copy { "a/../../b", "/x" } } })
    fails("must be relative to the template's context directory", T.template{ steps = { T.copy { "/etc", "/x" } } })
    fails("is a pattern", T.template{ steps = { T.copy { "src/*.py", "/x" } } })
    fails("mode must be an octal string", T.template{ steps = { T.copy { "a", "/b", mode = 755 } } })
    fails("mode must be an octal string", T.template{ steps = { T.copy { "a", "/b", mode = "0758" } } })
    fails("steps[1] (env): \"1A\" is not an environment variable name", T.template{ steps = { T.env { ["1A"] = "x" } } })
    fails("steps[1] (env): A must be a string, got a table", T.template{ steps = { T.env { A = {} } } })
    fails("steps[1] (env): expects at least one", T.template{ steps = { T.env {} } })
    fails("steps[1] (env): expects a table of NAME = value, got a list", T.template{ steps = { T.env { "A=1" } } })
    fails("steps[1] (workdir): expects one directory", T.template{ steps = { T.workdir "" } })
    fails("steps[1] (user): \"a b\" is not a user name", T.template{ steps = { T.user "a b" } })
    fails("steps[1] (user): expects a string or a table, got 3", T.template{ steps = { T.user(3) } })
    fails("start must be a command or", T.template{ start = 3 })
    fails("start expects { COMMAND, ready = CHECK }, got 2 commands", T.template{ start = { "a", "b" } })
    fails("start.ready must be a check", T.template{ start = { "a", ready = 8000 } })
    fails("start.ready: port(N): N must be an integer 1..65535, got 0", T.template{ start = { "a", ready = T.port(0) } })
    fails("start.ready: url(URL, STATUS): STATUS must be an HTTP status", T.template{ start = { "a", ready = T.url("http://x", 42) } })
    fails("start.ready: process(NAME)", T.template{ start = { "a", ready = T.process("") } })
    fails("start.ready: file(PATH)", T.template{ start = { "a", ready = T.file(nil) } })
    fails("start.ready: timeout(MS)", T.template{ start = { "a", ready = T.timeout(-1) } })
    fails("start.ready: cmd(COMMAND)", T.template{ start = { "a", ready = T.cmd(" ") } })
    fails("cpu must be a positive integer", T.template{ cpu = 1.5 })
    fails("memoryMB must be a positive integer", T.template{ memoryMB = 0 })
    fails("skipCache must be a boolean", T.template{ skipCache = 1 })
  end)
end)

describe("template files", function()
  local dir
  before_each(function() dir = cli.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. cli.q(dir)) end)

  it("see the DSL as globals, get their own directory as context, and may name another", function()
    cli.write(dir .. "/t.lua", 'return template { steps = { run "make", copy { "src", "/app" }, env { A = "1" }, workdir "/app",'
      .. ' user "user" }, start = { "serve", ready = url("http://localhost:1/") } }\n')
    local d = assert(T.load(dir .. "/t.lua"))
    assert.are.same({ dir, dir .. "/t.lua", 5 }, { d.context, d.file, #d.steps })
    assert.are.equal(dir .. "/t.lua:1", d.steps[2].where)
    cli.write(dir .. "/c.lua", 'local t = require("moonbox.template")\nreturn t.template { context = "sub" }\n')
    assert.are.equal(dir .. "/sub", assert(T.load(dir .. "/c.lua")).context)
    cli.write(dir .. "/plain.lua", 'return { from = "base", steps = { run "x" } }\n')   -- the table template{} takes
    assert.are.equal("RUN", assert(T.load(dir .. "/plain.lua")).steps[1].type)
  end)

  it("fail with the file:line of a syntax error, a run-time error, a bad field or no description", function()
    cli.write(dir .. "/syntax.lua", "return template {\n")
    fails(dir .. "/syntax.lua:2:", T.load(dir .. "/syntax.lua"))
    cli.write(dir .. "/boom.lua", "local x = nil\nreturn x.y\n")
    fails(dir .. "/boom.lua:2:", T.load(dir .. "/boom.lua"))
    cli.write(dir .. "/typo.lua", "return template {\n  steps = {\n    run { \"make\", usr = \"root\" },\n  },\n}\n")
    fails(dir .. "/typo.lua:3: template: steps[1] (run): unknown field usr", T.load(dir .. "/typo.lua"))
    cli.write(dir .. "/top.lua", "return { form = 'base' }\n")
    fails(dir .. "/top.lua: template: unknown field form (expected from", T.load(dir .. "/top.lua"))
    cli.write(dir .. "/none.lua", "template {}\n")
    fails("the file returns nothing", T.load(dir .. "/none.lua"))
    fails("absent.lua: No such file or directory", T.load(dir .. "/absent.lua"))
  end)
end)

describe("the COPY files hash", function()
  local files_hash = require("moonbox.e2b.template").files_hash
  local dir, mb
  setup(function() mb = require "moonbox" end)
  before_each(function()
    dir = cli.tmpdir()
    assert(os.execute(("mkdir -p %s/src/sub && printf a > %s/src/a && printf b > %s/src/sub/b && ln -s a %s/src/l")
      :format(cli.q(dir), cli.q(dir), cli.q(dir), cli.q(dir))))
  end)
  after_each(function() os.execute("rm -rf " .. cli.q(dir)) end)
  local function h(src, dest) return mb.run(function() return files_hash(dir, src, dest or "/dst") end) end

  it("is stable, and changes with a file's content, mode, name, a link's target, the destination", function()
    local h0 = assert(h("src"))
    assert.truthy(h0:match("^%x+$") and #h0 == 64, h0)
    assert.are.equal(h0, h("src"))
    local seen = { [h0] = "start" }
    local function changed(what, cmd)
      assert(os.execute(cmd:gsub("DIR", cli.q(dir))))
      local x = assert(h("src"))
      assert.is_nil(seen[x], what .. " gave the hash of " .. tostring(seen[x]))
      seen[x] = what
    end
    changed("content", "printf A > DIR/src/a")
    changed("mode", "chmod 700 DIR/src/a")
    changed("name", "mv DIR/src/sub/b DIR/src/sub/c")
    changed("link", "ln -sfn sub DIR/src/l")
    changed("new file", "touch DIR/src/sub/new")
    assert.are_not.equal(assert(h("src", "/other")), assert(h("src")))
    -- the time of a file is not part of it
    local before = h("src")
    assert(os.execute("touch -d 2001-01-01 " .. cli.q(dir .. "/src/a")))
    assert.are.equal(before, h("src"))
  end)

  it("hashes one file, and names a missing source", function()
    assert.truthy(#assert(h("src/a")) == 64)
    local x, e = h("src/none")
    assert.is_nil(x)
    assert.are.equal("TEMPLATE_FILES", e.code)
    assert.truthy(e.message:find("COPY src/none: no such file or directory", 1, true), e.message)
  end)
end)
