-- Workspace sync without a world: the gitignore matcher (a table of cases, then random rule
-- sets checked against git itself), the host's scans, packs and unpacks through the Lua binding,
-- the manifest parser, the base records and the pull's decisions (plan.lua).
local core = require "moonbox.core"
local manifest = require "moonbox.workspace.manifest"
local plan = require "moonbox.workspace.plan"

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

local function tmpdir()
  return (assert(io.popen("mktemp -d /tmp/mb-ws-unit.XXXXXX")):read("l"))
end

local function write(path, content)
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
end

local function scan_paths(root, opts)
  local r = assert(core.sync_root(root))
  local s, err = r:scan(opts)
  if not s then return nil, err end
  repeat
    local done, e = s:step(3)
    if done == nil then return nil, e end
  until done
  local set = {}
  for i, e in ipairs(s:entries()) do if i > 1 then set[e.path] = e end end
  return set, s
end

describe("the gitignore matcher", function()
  local function matcher(files)
    local ig = assert(core.ignore_new(1 << 20))
    for _, f in ipairs(files) do assert(ig:push(f[1], f[2], f[3] or "file")) end
    return ig
  end

  it("follows gitignore(5): negation, directory-only, anchoring, **, classes, escapes", function()
    local ig = matcher{ { "", "*.log\n!keep.log\nbuild/\n/only-root\ndoc/*.md\na/**/z\n**/deep\nout/**\n[a-c]?.c\n\\#h\n\\!b\nsp\\ \n" } }
    local cases = {
      { "x.log", false, true }, { "d/x.log", false, true }, { "keep.log", false, false },
      { "build", true, true }, { "build", false, false }, { "s/build", true, true },
      { "only-root", false, true }, { "s/only-root", false, false },
      { "doc/a.md", false, true }, { "doc/s/a.md", false, false },
      { "a/z", false, true }, { "a/q/r/z", false, true }, { "q/a/z", false, false },
      { "deep", true, true }, { "x/y/deep", false, true },
      { "out", true, false }, { "out/f", false, true }, { "out/d/f", false, true },
      { "b9.c", false, true }, { "d9.c", false, false }, { "#h", false, true }, { "!b", false, true },
      { "sp ", false, true }, { "sp", false, false }, { "src/main.c", false, false },
    }
    for _, c in ipairs(cases) do
      assert.are.equal(c[3], ig:match(c[1], c[2]), ("%s (%s)"):format(c[1], c[2] and "dir" or "file"))
    end
  end)

  it("lets a deeper .gitignore decide, and the caller's patterns win over every file", function()
    local ig = matcher{ { "", "*.o\n!keep.o\n" }, { "sub", "keep.o\n!x.o\n" } }
    assert.is_true(ig:match("sub/keep.o", false))
    assert.is_false(ig:match("sub/x.o", false))
    assert.is_false(ig:match("keep.o", false))
    local d = ig:depth()
    assert(ig:push("", "keep.o\n", "caller"))
    assert.is_true(ig:match("keep.o", false))
    ig:pop_to(d)
    assert.is_false(ig:match("keep.o", false))
  end)

  it("refuses rule sets over its byte limit", function()
    local ig = assert(core.ignore_new(2000))
    local ok, err = ig:push("", ("x"):rep(5000) .. "\n", "file")
    assert.is_nil(ok)
    assert.are.equal("SYNC_TOO_LARGE", err.code)
  end)

  -- The same tree, random rule sets: what a scan keeps is what `git ls-files --others
  -- --exclude-standard` lists (files; git lists no directories).
  local has_git = select(2, sh("git --version")) == 0
  local pieces = { "*.log", "!keep.log", "build/", "/build", "a/**/c", "**/foo*", "doc/", "!doc/keep.md", "[ab]*.txt",
    "?oo.txt", "a/b", "x\\ y", "*.tm?", "!src/build/", "out/**", "!out/keep", "*", "!*.c", "src/", "!src/", "/a/",
    "deep/**/x", "**/b/", "f[!o]o.txt", "*.md", "!README.md", "#c", "", "  ", "!a/b/c/", "nested/**", "**" }
  local files = { "keep.log", "x.log", "build/out.o", "src/build/b.o", "src/main.c", "a/b/c/f.txt", "a/c/f.txt",
    "a/foo.bar", "doc/keep.md", "doc/x.md", "btest.txt", "foo.txt", "fxo.txt", "x y", "t.tmp", "out/keep", "out/o/x",
    "deep/1/2/x", "deep/x", "README.md", "nested/n/n.txt", "b/inner.txt", "z.c" }
  local function seeded(seed)
    local x = seed
    return function(n)
      x = (x * 1103515245 + 12345) % 2147483648
      return x % n + 1
    end
  end

  it("agrees with git on random rule sets", function()
    if not has_git then pending("git is not installed") return end
    for seed = 1, 30 do
      local dir = tmpdir()
      local dirs = {}
      for _, f in ipairs(files) do
        local d = f:match("^(.*)/[^/]*$")
        if d then dirs[#dirs + 1] = ("'%s/%s'"):format(dir, d) end
      end
      sh(("cd %s && git init -q . && mkdir -p %s"):format(dir, table.concat(dirs, " ")))
      for _, f in ipairs(files) do write(dir .. "/" .. f, f) end
      local rnd = seeded(seed)
      local function rules(n)
        local t = {}
        for i = 1, n do t[i] = pieces[rnd(#pieces)] end
        return table.concat(t, "\n") .. "\n"
      end
      write(dir .. "/.gitignore", rules(rnd(6)))
      if rnd(2) == 1 then write(dir .. "/a/.gitignore", rules(rnd(4))) end
      if rnd(2) == 1 then write(dir .. "/src/.gitignore", rules(rnd(3))) end
      local out = sh(("cd %s && HOME=%s GIT_CONFIG_NOSYSTEM=1 git -c core.excludesFile=/dev/null ls-files -z --others --exclude-standard"):format(dir, dir))
      local want = {}
      for p in out:gmatch("([^%z]+)%z") do want[p] = true end
      local got = {}
      local set = assert(scan_paths(dir, { gitignore = true, exclude = ".git/" }))
      for p, e in pairs(set) do if e.type == "file" then got[p] = true end end
      local gi = io.open(dir .. "/.gitignore"):read("a")
      assert.are.same(want, got, "rules:\n" .. gi)
      sh("rm -rf " .. dir)
    end
  end)
end)

describe("the host side of a sync", function()
  local dir
  before_each(function()
    dir = tmpdir()
    sh(("mkdir -p %s/t/a/b %s/t/empty && printf hello > %s/t/a/x && ln -s ../x %s/t/a/b/l && ln -s /etc %s/t/out"):format(
      dir, dir, dir, dir, dir))
  end)
  after_each(function() sh("rm -rf " .. dir) end)

  it("scans without following links and names what it refuses", function()
    local set = assert(scan_paths(dir .. "/t", {}))
    assert.are.equal("symlink", set.out.type)
    assert.are.equal("/etc", set.out.link)
    assert.are.equal("directory", set.empty.type)
    assert.is_nil(set["out/passwd"])
    sh(("mkfifo %s/t/a/fifo"):format(dir))
    local none, err = scan_paths(dir .. "/t", {})
    assert.is_nil(none)
    assert.are.equal("SYNC_UNSUPPORTED_TYPE", err.code)
    assert.are.equal("a/fifo", err.path)
    assert.truthy(tostring(err):find("a/fifo", 1, true))
    assert(scan_paths(dir .. "/t", { exclude = "*fifo\n" }))
    local _, lerr = scan_paths(dir .. "/t", { exclude = "*fifo\n", maxFiles = 2 })
    assert.are.equal("SYNC_TOO_MANY_FILES", lerr.code)
    assert.truthy(lerr.message:find("maxFiles", 1, true))
    local _, berr = scan_paths(dir .. "/t", { exclude = "*fifo\n", maxBytes = 3 })
    assert.are.equal("SYNC_TOO_LARGE", berr.code)
    assert.truthy(berr.message:find("maxBytes", 1, true))
    local r = core.sync_root(dir .. "/missing")
    assert.is_nil(r)
  end)

  it("packs into one tar stream that GNU tar extracts as the tree was", function()
    local root = assert(core.sync_root(dir .. "/t"))
    local _, s = assert(scan_paths(dir .. "/t", {}))
    local p = assert(root:pack(s))
    local f = assert(io.open(dir .. "/a.tar", "wb"))
    while true do
      local c, err = p:read(4096)
      assert.is_nil(err)
      if not c then break end
      f:write(c)
    end
    f:close()
    assert.are.equal(1, p:progress().files)
    p:close()
    sh(("mkdir %s/x && tar -x -p -f %s/a.tar -C %s/x --warning=no-unknown-keyword"):format(dir, dir, dir))
    local out = sh(("cd %s && diff -r --no-dereference t x && echo same"):format(dir))
    assert.are.equal("same\n", out)
    local hashed = s:entries()
    for _, e in ipairs(hashed) do
      if e.path == "a/x" then assert.are.equal(core.sha256_hex("hello"), e.sha256) end
    end
    -- a closed pack is refused as an upload source
    assert.has_error(function() core.http_request({ url = "http://127.0.0.1:9/", body_source = p, max_bytes = 1 }, function() end) end)
  end)

  it("unpacks untrusted archives into a staging directory, refusing every hostile entry by name", function()
    local root = assert(core.sync_root(dir .. "/t"))
    assert(root:mkstage(".moonbox-sync-1-a.tmp"))
    local py = [[
import sys, tarfile, io
kind, out = sys.argv[1], sys.argv[2]
t = tarfile.open(out, "w", format=tarfile.PAX_FORMAT)
def add(name, type=tarfile.REGTYPE, data=b"x", link=""):
    i = tarfile.TarInfo(name); i.type = type; i.linkname = link; i.size = len(data) if type == tarfile.REGTYPE else 0
    t.addfile(i, io.BytesIO(data) if type == tarfile.REGTYPE else None)
add("ok")
{"dotdot": lambda: add("../evil"), "abs": lambda: add("/tmp/evil"), "hard": lambda: add("h", tarfile.LNKTYPE, link="/etc/passwd"),
 "dev": lambda: add("d", tarfile.CHRTYPE), "fifo": lambda: add("f", tarfile.FIFOTYPE), "none": lambda: None}[kind]()
t.close()
]]
    write(dir .. "/mk.py", py)
    for kind, what in pairs({ dotdot = "'..'", abs = "absolute", hard = "hard link", dev = "device", fifo = "FIFO" }) do
      sh(("python3 %s/mk.py %s %s/h.tar"):format(dir, kind, dir))
      local u = assert(root:unpack(dir .. "/h.tar", ".moonbox-sync-1-a.tmp", 10, 1000, kind))
      local done, err
      repeat done, err = u:step(100) until done ~= false
      assert.is_nil(done, kind)
      assert.are.equal("SYNC_UNSAFE_ENTRY", err.code, kind)
      assert.truthy(err.message:find(what, 1, true), err.message)
      assert.truthy(#err.path > 0)
    end
    sh(("python3 %s/mk.py none %s/h.tar"):format(dir, dir))
    local u = assert(root:unpack(dir .. "/h.tar", ".moonbox-sync-1-a.tmp", 10, 1000, "z"))
    repeat local done, uerr = u:step(100); assert(done ~= nil, uerr) until done
    local items = u:items()
    assert.are.equal(1, #items)
    assert.are.equal("ok", items[1].path)
    assert.are.equal(core.sha256_hex("x"), items[1].sha256)
    assert.are.equal("zf0", items[1].staged)
    assert(root:place(".moonbox-sync-1-a.tmp/zf0", "a/new", "absent"))
    assert.are.equal("x", io.open(dir .. "/t/a/new"):read("a"))
    local ok, err = root:place(".moonbox-sync-1-a.tmp/zf0", "out/x", nil)
    assert.is_nil(ok)
    assert.are.equal("SYNC_UNSAFE_PATH", err.code)
    assert(root:rmtree(".moonbox-sync-1-a.tmp"))
  end)

  it("hashes in steps and notices a file that changes while it is read", function()
    write(dir .. "/t/big", ("y"):rep(300000))
    local root = assert(core.sync_root(dir .. "/t"))
    local h = assert(root:hash("big"))
    local steps, hex, size = 0, nil, nil
    repeat
      steps = steps + 1
      hex, size = h:step(65536)
    until hex ~= false
    assert.are.equal(core.sha256_hex(("y"):rep(300000)), hex)
    assert.are.equal(300000, size)
    assert.truthy(steps > 2)
    local st = assert(root:lstat("big"))
    assert.are.equal("file", st.type)
    assert.is_false(root:lstat("nope"))
  end)
end)

describe("the sandbox's manifest records", function()
  it("parse as they stream, however they are cut", function()
    local rec = "f 0644 5 1.000000001 " .. ("a"):rep(64) .. " 3 a\nb 0 \n" .. "d 0755 0 2.000000000 - 1 d 0 \n"
      .. "l 0777 0 3.000000000 - 3 d/l 4 ../x\n" .. "x d 0 0.000000000 - 2 nm 0 \n"
      .. "f 0600 1 4.000000000 ! 2 ro 0 \n"
    for cut = 1, #rec do
      local p = manifest.parser(100)
      assert(p:feed(rec:sub(1, cut)))
      assert(p:feed(rec:sub(cut + 1)))
      local e, x = assert(p:finish())
      assert.are.same({ t = "f", m = 420, s = 5, h = ("a"):rep(64), mt = 1, mtn = 1 }, e["a\nb"])
      assert.are.equal(493, e.d.m)
      assert.are.equal("../x", e["d/l"].l)
      assert.are.equal("d", x.nm)
      assert.is_false(e.ro.h)
    end
    local p = manifest.parser(1)
    assert.is_nil((p:feed(rec)))
    local _, err = manifest.parser(10):feed(("z"):rep(300))
    assert.are.equal("SYNC_BAD_MANIFEST", err.code)
    local q = manifest.parser(10)
    assert(q:feed("f 0644 5 1.0"))
    assert.are.equal("SYNC_BAD_MANIFEST", select(2, q:finish()).code)
  end)

  it("are stored atomically, one file per world, world directory and host directory", function()
    local dir = tmpdir()
    local k1, k2 = manifest.key("local", "/a", "/b"), manifest.key("local", "/a", "/c")
    assert.are_not.equal(k1, k2)
    assert.is_false(manifest.load(dir .. "/state", k1))
    local mb = require "moonbox"
    mb.run(function() assert(manifest.save(dir .. "/state", k1, { entries = { x = { t = "f", m = 420, s = 1, h = "h" } } })) end)
    local b = assert(manifest.load(dir .. "/state", k1))
    assert.are.equal("h", b.entries.x.h)
    write(dir .. "/state/" .. k2 .. ".json", "{not json")
    assert.are.equal("SYNC_BAD_STATE", select(2, manifest.load(dir .. "/state", k2)).code)
    assert.are.equal("/x/moonbox/sync", manifest.state_dir({}, function(n) return n == "XDG_STATE_HOME" and "/x" or nil end))
    sh("rm -rf " .. dir)
  end)
end)

describe("a pull's decisions", function()
  local f = function(h, m) return { t = "f", m = m or 420, s = 1, h = h, v = "v-" .. h } end
  it("classifies what changed in the sandbox since the base", function()
    local base = { a = f("1"), b = f("2"), c = f("3"), d = { t = "d", m = 493 }, ["x/y"] = f("4"), l = { t = "l", l = "t" } }
    local sandbox = { a = f("1"), b = f("9"), c = f("3", 384), d = { t = "d", m = 448 }, n = f("5"), l = { t = "l", l = "u" } }
    local ch = assert(plan.changes(base, sandbox, { x = "d" }))
    local kinds = {}
    for _, c in ipairs(ch) do kinds[c.path] = c.kind end
    assert.are.same({ b = "modified", c = "mode", d = "mode", n = "added", l = "modified" }, kinds) -- x/y: under an excluded dir
    local none, err = plan.changes({}, { r = { t = "f", m = 420, s = 1, h = false } }, {})
    assert.is_nil(none)
    assert.are.equal("SYNC_PERMISSION_DENIED", err.code)
  end)

  it("applies what the host left alone, skips what both did, and reports the rest as conflicts", function()
    local H = function(h, m) return { type = "file", mode = m or 420, size = 1, version = "v-" .. h } end
    local no_hash = function() error("hashed without need") end
    local c = { path = "p", kind = "modified", b = f("1"), s = f("2") }
    assert.are.equal("apply", plan.decide(c, H("1"), no_hash))
    local touched = { type = "file", mode = 420, size = 1, version = "other" }
    assert.are.equal("apply", plan.decide(c, touched, function() return "1" end))     -- same bytes, new inode
    assert.are.equal("same", plan.decide(c, touched, function() return "2" end))
    local d, why = plan.decide(c, touched, function() return "3" end)
    assert.are.equal("conflict", d)
    assert.truthy(why:find("changed on the host"))
    assert.are.equal("conflict", plan.decide({ path = "p", kind = "added", s = f("2") }, H("7"), function() return "7" end))
    assert.are.equal("apply", plan.decide({ path = "p", kind = "added", s = f("2") }, false, no_hash))
    local dd, dwhy = plan.decide(c, false, no_hash)
    assert.are.equal("conflict", dd)
    assert.truthy(dwhy:find("deleted on the host"))
    assert.are.equal("apply", plan.decide({ path = "p", kind = "deleted", b = f("1") }, H("1"), no_hash))
    assert.are.equal("same", plan.decide({ path = "p", kind = "deleted", b = f("1") }, false, no_hash))
    assert.is_true(plan.excluded_at("a/b/c", { ["a/b"] = "d" }))
    assert.is_false(plan.excluded_at("a/bc", { ["a/b"] = "d" }))
  end)

  it("takes from a fetched archive only what was asked for, once, never below a link of the same archive", function()
    local function want(list)
      local w = {}
      for p, t in pairs(list) do w[p] = { path = p, s = { t = t } } end
      return w
    end
    local item = function(p, t) return { path = p, type = t or "file", size = 1 } end
    assert(plan.check_items({ item("a"), item("l", "symlink") }, want{ a = "f", l = "l" }))
    local cases = {
      { { item("a"), item("x") }, { a = "f" }, "SYNC_UNSAFE_ENTRY", "x" },
      { { item("a"), item("a") }, { a = "f" }, "SYNC_UNSAFE_ENTRY", "a" },
      { { item("d", "symlink"), item("d/f") }, { d = "l", ["d/f"] = "f" }, "SYNC_UNSAFE_ENTRY", "d/f" },
      { { item("a", "symlink") }, { a = "f" }, "SYNC_CHANGED", "a" },
      { { item("a") }, { a = "f", b = "f" }, "SYNC_CHANGED", "b" },
    }
    for _, c in ipairs(cases) do
      local ok, err = plan.check_items(c[1], want(c[2]))
      assert.is_nil(ok)
      assert.are.equal(c[3], err.code)
      assert.are.equal(c[4], err.path)
    end
  end)

  it("tells what lies below an excluded entry", function()
    assert.is_false(plan.excluded_at("a/bc", { ["a/b"] = "d" }))
  end)
end)
