-- Templates described in Lua, built by the suite's sandboxd through E2B's template API
-- (client:buildTemplate, `moonbox template …`), then used by a composition's e2b plugin
-- (template = NAME): the steps' files, env, workdir and user, the start command with its ready
-- check; a failing step's reason; a missing COPY source; list and delete.
local cjson = require "cjson"
local compose = require "moonbox.compose"
local T = require "moonbox.template"
local cli = require "support.cli"
local q = cli.q

local function uniq(p) return ("%s-%d%d"):format(p, os.time() % 100000, math.random(1000, 9999)) end

-- A context directory: src/app.py, src/sub/data.txt (a directory to COPY), and the template file.
local TEMPLATE = [[
return template {
  from = "base",
  steps = {
    run "echo step-one-output && id -un",
    run { "mkdir -p /opt/made", "touch /opt/made/by-root", user = "root" },
    copy { "src", "/home/user/app", mode = "755" },
    env { MODE = "prod", LEVEL = 3 },
    workdir "/home/user/app",
    run "pwd > /tmp/build-pwd && echo \"$MODE\" > /tmp/build-mode",
    user "user",
    run "id -un > /tmp/build-user",
  },
  start = { "python3 -m http.server 8000", ready = port(8000) },
}
]]

local function context()
  local dir = cli.tmpdir()
  assert(os.execute(("mkdir -p %s/src/sub"):format(q(dir))))
  cli.write(dir .. "/src/app.py", "print('hello from the template')\n")
  cli.write(dir .. "/src/sub/data.txt", "data\n")
  cli.write(dir .. "/app.lua", TEMPLATE)
  return dir
end

describe("templates built from Lua #sandboxd", function()
  local mb, client, dir
  local made = {}
  setup(function()
    mb = require "moonbox"
    client = mb.run(function() return assert(require("moonbox.e2b").client{}) end)
    dir = context()
  end)
  teardown(function()
    mb.run(function() for _, n in ipairs(made) do client:deleteTemplate(n) end end)
    os.execute("rm -rf " .. q(dir))
  end)

  local function build(desc, name, extra)
    made[#made + 1] = name
    local logs = {}
    local o = { name = name, onLogs = function(e) logs[#logs + 1] = e end }
    for k, v in pairs(extra or {}) do o[k] = v end
    local r, err = mb.run(function() return client:buildTemplate(desc, o) end)
    return r, err, logs
  end

  -- fn(ctx) in a started composition whose e2b plugin starts from `template`
  local function with(template, fn)
    return mb.run(function()
      local comp = assert(compose.load("t.lua", { source = ('plugin "e2b" { template = %q, timeoutMs = 120000 }\n'
        .. 'plugin "fs" {}\nplugin "subprocess" {}\n'):format(template) }))
      local ctx, loaded = assert(compose.start(comp))
      local res = table.pack(pcall(fn, ctx))
      local ok, err = compose.stop(ctx, loaded)
      if not res[1] then error(res[2], 0) end
      assert(ok, err)
      return table.unpack(res, 2, res.n)
    end)
  end

  local function sh(ctx, script)
    local h = assert(ctx.subprocess:spawn{ argv = { "/bin/sh", "-c", script }, cwd = "/home/user", graceMs = 100,
      stdio = { stdin = "ignore", stdout = { maxBytes = 65536 }, stderr = { maxBytes = 65536 } } })
    local r = assert(h:wait(30000))
    return h.collected.stdout:readFrom(0).text, r.exitCode, h.collected.stderr:readFrom(0).text
  end

  it("builds RUN, COPY of a directory, ENV, WORKDIR, USER and a start command; the e2b plugin starts from it", function()
    local desc = assert(T.load(dir .. "/app.lua"))
    local name = uniq("mbt-app")
    local r, err, logs = build(desc, name)
    assert(r, err)
    assert.are.equal(name, r.name)
    assert.truthy(r.templateId ~= "" and r.buildId ~= "")
    -- the log came entry by entry: moonbox's own lines, then the server's, each step's output under its number
    local text, steps = {}, {}
    for _, e in ipairs(logs) do
      text[#text + 1] = e.message
      if math.type(e.step) == "integer" then steps[e.step] = (steps[e.step] or "") .. e.message .. "\n" end
    end
    text = table.concat(text, "\n")
    assert.truthy(text:find("Requesting build for template: " .. name, 1, true), text)
    assert.truthy(text:find("Uploaded 'src'", 1, true), text)
    assert.truthy(steps[1] and steps[1]:find("step-one-output\nuser\n", 1, true), tostring(steps[1]))
    for i = 1, #desc.steps do assert.truthy(steps[i], "no log entry of step " .. i .. ":\n" .. text) end

    with(name, function(ctx)
      local out, code, serr = sh(ctx, "cat /home/user/app/app.py /home/user/app/sub/data.txt; stat -c '%a %U' "
        .. "/home/user/app/app.py /home/user/app/sub/data.txt; ls /opt/made; echo MODE=$MODE LEVEL=$LEVEL; "
        .. "cat /tmp/build-pwd /tmp/build-mode /tmp/build-user; "
        .. "curl -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:8000/app.py")
      assert.are.equal(0, code, serr)
      assert.are.equal("print('hello from the template')\ndata\n755 user\n755 user\nby-root\nMODE=prod LEVEL=3\n"
        .. "/home/user/app\nprod\nuser\n200\n", out)
      -- the start command runs in the template's workdir: it serves the copied files
    end)
  end)

  it("uploads a COPY's files once: a rebuild with the same files skips the upload", function()
    local name = uniq("mbt-twice")
    local desc = assert(T.template{ context = dir, steps = { T.copy { "src", "/home/user/app" } } })
    local r, err, logs = build(desc, name)
    assert(r, err)
    local function said(ls, s)
      for _, e in ipairs(ls) do if e.message:find(s, 1, true) then return true end end
      return false
    end
    assert.is_true(said(logs, "Uploaded 'src'"))
    r, err, logs = build(desc, name)
    assert(r, err)
    assert.is_true(said(logs, "Skipping upload of 'src', already cached"))
    -- a changed file is a new hash: uploaded again
    cli.write(dir .. "/src/sub/data.txt", "data, changed\n")
    r, err, logs = build(desc, name)
    cli.write(dir .. "/src/sub/data.txt", "data\n")
    assert(r, err)
    assert.is_true(said(logs, "Uploaded 'src'"))
  end)

  it("names the failing step, its file:line and its output", function()
    local f = cli.write(dir .. "/fail.lua", 'return template {\n  steps = {\n    run "echo fine",\n'
      .. '    run "echo this-went-wrong >&2; exit 3",\n    run "echo never",\n  },\n}\n')
    local desc = assert(T.load(f))
    local r, err, logs = build(desc, uniq("mbt-fail"))
    assert.is_nil(r)
    assert.are.equal("TEMPLATE_BUILD_FAILED", err.code, tostring(err))
    assert.are.same({ 2, f .. ":4" }, { err.step, err.where })
    assert.truthy(err.reason:find("exit status 3", 1, true), err.reason)
    assert.truthy(err.reason:find("this-went-wrong", 1, true), err.reason)
    assert.truthy(err.message:find(f .. ":4: template mbt-fail", 1, true), err.message)
    local errors_seen = 0
    for _, e in ipairs(logs) do if e.level == "error" then errors_seen = errors_seen + 1 end end
    assert.is_true(errors_seen >= 1)
    for _, e in ipairs(logs) do assert.is_nil(e.message:find("never", 1, true), "a step after the failing one ran") end
    -- a template that failed is not there
    local all = assert(mb.run(function() return client:templates() end))
    for _, t in ipairs(all) do for _, n in ipairs(t.names) do assert.is_nil(n:find("^mbt%-fail")) end end
  end)

  it("refuses a missing COPY source before any request", function()
    local desc = assert(T.template{ context = dir, steps = { T.copy { "no-such-dir", "/x" } } })
    local before = mb.http.stats().requests
    local r, err = build(desc, uniq("mbt-nosrc"))
    assert.is_nil(r)
    assert.are.equal("TEMPLATE_FILES", err.code)
    assert.truthy(err.message:find("COPY no-such-dir: no such file or directory", 1, true), err.message)
    assert.are.equal(before, mb.http.stats().requests)
  end)

  it("fails the start command's ready check", function()
    local r, err = build(assert(T.template{ start = { "exit 4", ready = T.file("/never") } }), uniq("mbt-start"))
    assert.is_nil(r)
    assert.are.equal("TEMPLATE_BUILD_FAILED", err.code, tostring(err))
    assert.are.equal("finalize", err.step)
    assert.truthy(err.message:find("the start command failed", 1, true), err.message)
  end)

  it("lists base and built templates and deletes one (by name)", function()
    local name = uniq("mbt-list")
    assert(build(assert(T.template{ steps = { T.run "true" } }), name))
    local function names()
      local all = assert(mb.run(function() return client:templates() end))
      local s = {}
      for _, t in ipairs(all) do for _, n in ipairs(t.names) do s[n] = t end end
      return s
    end
    local s = names()
    assert.truthy(s.base and s.base.public == true)
    assert.truthy(s[name] and s[name].buildStatus == "ready", name)
    assert.are.equal("number", type(s[name].cpuCount))
    assert.is_true(mb.run(function() return client:deleteTemplate(name) end))
    assert.is_nil(names()[name])
    assert.is_false(mb.run(function() return client:deleteTemplate(name) end))
  end)

  it("builds with tags (name:tag, tags): the e2b plugin's template = name:tag starts from that build", function()
    cli.write(dir .. "/one.lua", 'return template { steps = { run "echo one > /home/user/which" } }\n')
    cli.write(dir .. "/two.lua", 'return template { steps = { run "echo two > /home/user/which" } }\n')
    local one, two = assert(T.load(dir .. "/one.lua")), assert(T.load(dir .. "/two.lua"))
    local name = uniq("mbt-tags")
    local r1 = assert(build(one, name .. ":v1"))
    assert.are.same({ "v1" }, r1.tags)
    local r2 = assert(build(two, name, { tags = { "v2", "stable" } }))
    assert.are.same({ "v2", "stable" }, r2.tags)
    assert.are.equal(r1.templateId, r2.templateId)
    for ref, want in pairs({ [name .. ":v1"] = "one\n", [name .. ":v2"] = "two\n", [name .. ":stable"] = "two\n" }) do
      with(ref, function(ctx) assert.are.equal(want, (sh(ctx, "cat /home/user/which"))) end)
    end
  end)

  it("builds four templates at once while a task collects garbage: each gets its own files, logs and name", function()
    local names, ctxs = {}, {}
    for i = 1, 4 do
      names[i] = uniq("mbt-conc" .. i)
      made[#made + 1] = names[i]
      ctxs[i] = cli.tmpdir()
      cli.write(ctxs[i] .. "/mine.txt", ("file of build %d\n"):format(i))
    end
    local results = mb.run(function()
      local gc = mb.spawn(function() while true do collectgarbage() mb.sleep(1) end end)
      local tasks = {}
      for i = 1, 4 do
        tasks[i] = mb.spawn(function()
          local logs = {}
          local desc = assert(T.template{ context = ctxs[i], steps = {
            T.copy { "mine.txt", "/home/user/mine.txt" },
            T.run(("echo marker-of-build-%d; echo %d > /home/user/which"):format(i, i)) } })
          local r, err = client:buildTemplate(desc, { name = names[i], onLogs = function(e) logs[#logs + 1] = e.message end })
          return { r = r, err = err, logs = table.concat(logs, "\n") }
        end)
      end
      local out = {}
      for i = 1, 4 do
        local ok, v = tasks[i]:join(240000)
        assert(ok, v)
        out[i] = v
      end
      gc:cancel()
      return out
    end)
    for i, res in ipairs(results) do
      assert(res.r, res.err)
      assert.truthy(res.logs:find("marker-of-build-" .. i, 1, true), res.logs)
      for j = 1, 4 do                                   -- no build's output in another's logs
        if j ~= i then assert.is_nil(res.logs:find("marker-of-build-" .. j, 1, true), res.logs) end
      end
    end
    local seen = {}
    for _, t in ipairs(assert(mb.run(function() return client:templates() end))) do
      for _, n in ipairs(t.names) do seen[n] = t.buildStatus end
    end
    for i = 1, 4 do
      assert.are.equal("ready", seen[names[i]], names[i])
      with(names[i], function(ctx)
        assert.are.equal(("file of build %d\n"):format(i), (sh(ctx, "cat /home/user/mine.txt")))
        assert.are.equal(i .. "\n", (sh(ctx, "cat /home/user/which")))
      end)
    end
    for i = 1, 4 do os.execute("rm -rf " .. q(ctxs[i])) end
  end)

  it("checks buildTemplate's options strictly", function()
    mb.run(function()
      assert.has_error(function() client:buildTemplate({}, { nmae = "x" }) end,
        "e2b: buildTemplate: unknown field nmae (expected name, tags, skipCache, onLogs, timeoutMs; the nearest is name)")
      assert.has_error(function() client:buildTemplate({}, { name = "x", tags = "v1" }) end, "e2b: buildTemplate: tags must be a list of strings")
      assert.has_error(function() client:buildTemplate({}, {}) end, "e2b: buildTemplate: name must be a non-empty string")
      local r, err = client:buildTemplate({ stpes = {} }, { name = "x" })
      assert.is_nil(r)
      assert.are.equal("TEMPLATE_INVALID", err.code)
    end)
  end)
end)

describe("moonbox template #sandboxd", function()
  local dir
  setup(function() dir = context() end)
  teardown(function() os.execute("rm -rf " .. q(dir)) end)

  it("builds with plain log lines when stdout is no terminal, lists (--json) and deletes", function()
    local name = uniq("mbt-cli")
    local code, out, err = cli.moonbox(("template build %s --name %s"):format(q(dir .. "/app.lua"), name))
    assert.are.equal(0, code, err)
    assert.is_nil(out:find("\27[", 1, true), out)
    assert.truthy(out:find("\n%[3/8%] COPY src /home/user/app 0755\n"), out)
    assert.truthy(out:find("\nstep-one-output\n", 1, true), out)
    assert.truthy(out:find(("\nbuilt template %s %%(%%w+%%) in [%%d.]+ s\n$"):format(name:gsub("%-", "%%-"))), out)
    code, out = cli.moonbox("template list --json")
    assert.are.equal(0, code)
    local found
    for _, t in ipairs(cjson.decode(out)) do
      for _, n in ipairs(t.names) do if n == name then found = t end end
    end
    assert.truthy(found and found.buildStatus == "ready", out)
    code, out = cli.moonbox("template list")
    assert.truthy(out:find("^TEMPLATE ID"), out)
    assert.truthy(out:find(name, 1, true), out)
    code, out = cli.moonbox("template delete " .. name)
    assert.are.same({ 0, "deleted template " .. name .. "\n" }, { code, out })
    code, out, err = cli.moonbox("template delete " .. name)
    assert.are.same({ 1, "", "moonbox: E2B_NOT_FOUND: template " .. name .. " not found\n" }, { code, out, err })
  end)

  it("--tag (repeatable) and --name NAME:TAG tag the build", function()
    local name = uniq("mbt-clitag")
    local f = dir .. "/tagged.lua"
    cli.write(f, 'return template { steps = { run "true" } }\n')
    local code, out, err = cli.moonbox(("template build %s --name %s:v1"):format(q(f), name))
    assert.are.equal(0, code, err)
    assert.truthy(out:find(", tagged v1) in ", 1, true), out)
    code, out, err = cli.moonbox(("template build %s --name %s --tag v2 --tag stable"):format(q(f), name))
    assert.are.equal(0, code, err)
    assert.truthy(out:find(", tagged v2, stable) in ", 1, true), out)
    code, out, err = cli.moonbox(("template build %s --name %s --tag 'not a tag'"):format(q(f), name))
    assert.are.equal(1, code, out)
    assert.truthy(err:find("tag 'not a tag'", 1, true), err)
    code, out, err = cli.moonbox(("template build %s --name %s --tag ''"):format(q(f), name))
    assert.are.equal(2, code, out)
    assert.truthy(cli.moonbox("template delete " .. name) == 0)
  end)

  it("shows a status line on a terminal", function()
    if not os.execute("command -v script >/dev/null 2>&1") then pending("no script(1) to give the command a terminal") return end
    local name = uniq("mbt-tty")
    local f = cli.write(dir .. "/tty.lua", 'return template { steps = { run "sleep 1; echo slept" } }\n')
    local log = os.tmpname()
    local cmd = ("script -qec %s %s >/dev/null 2>&1"):format(q(("%s template build %s --name %s"):format(q(cli.bin), q(f), name)), q(log))
    assert(os.execute(cmd))
    local typed = cli.read(log)
    os.remove(log)
    cli.moonbox("template delete " .. name)
    assert.truthy(typed:find("\r\27[K", 1, true), typed)                  -- the status line, redrawn in place
    assert.truthy(typed:find("[1/1] RUN sleep 1; echo slept", 1, true), typed)
    assert.truthy(typed:find("slept", 1, true), typed)
    assert.truthy(typed:find("built template " .. name, 1, true), typed)
  end)

  it("exits 1 with the failing step's reason, 1 for a bad file (no request), 2 for a usage mistake", function()
    local f = cli.write(dir .. "/fail.lua", 'return template { steps = { run "echo broken-step >&2; false" } }\n')
    local name = uniq("mbt-clifail")
    local code, out, err = cli.moonbox(("template build %s --name %s"):format(q(f), name))
    assert.are.equal(1, code)
    assert.truthy(out:find("broken-step", 1, true), out)
    assert.truthy(err:match("^moonbox: TEMPLATE_BUILD_FAILED: " .. f:gsub("%p", "%%%0") .. ":1: template " .. name:gsub("%-", "%%-")
      .. ": step 1 failed: .*exit status 1.*broken%-step\n$"), err)
    local bad = cli.write(dir .. "/bad.lua", 'return template { steps = { run { "make", usr = "root" } } }\n')
    -- no endpoint: the file is refused before any request (nothing could be reached)
    code, out, err = cli.moonbox(("template build %s --name x"):format(q(bad)), { prefix = cli.NO_E2B .. " MOONBOX_SANDBOXD_AUTOSTART=0" })
    assert.are.same({ 1, "" }, { code, out })
    assert.are.equal("moonbox: TEMPLATE_INVALID: " .. bad .. ":1: template: steps[1] (run): unknown field usr (expected user, force; "
      .. "the nearest is user)\n", err)
    for _, c in ipairs({
      { "template build " .. q(f), "template build: --name NAME is required" },
      { "template build --name x", "template build: which file?" },
      { "template build " .. q(f) .. " --nmae x", "template build: unknown option --nmae (did you mean --name?)" },
      { "template biuld", "template: unknown subcommand biuld (did you mean build?)" },
      { "template delete", "template delete: which template?" },
      { "template list extra", "template list: unexpected argument extra" },
    }) do
      code, out, err = cli.moonbox(c[1])
      assert.are.equal(2, code, c[1])
      assert.truthy(err:find(c[2], 1, true), err)
    end
    code, out = cli.moonbox("template build --help")
    assert.are.equal(0, code)
    assert.truthy(out:find("usage: moonbox template build FILE.lua --name NAME", 1, true), out)
  end)
end)
