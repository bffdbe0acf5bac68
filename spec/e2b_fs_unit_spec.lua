-- The E2B fs provider against a scripted sandbox: request budgets, tool arguments, error codes.
local fake_mb = require "support.fake_mb"
local fake_sandbox = require "support.fake_sandbox"
local errors = require "moonbox.errors"

local mb
local fsmod
local function tool_err(code, detail)
  return nil, errors.new("TOOL_" .. code, "mbwrap x: " .. detail, { tool_code = code, exit_code = 1 })
end

-- handlers.read (mbwrap read) is split out of handlers.tool: tool(args) gets every other tool.
local function make(handlers, config)
  if handlers.read then
    local read, other = handlers.read, handlers.tool
    handlers.tool = function(args, opts)
      if args[1] == "read" then return read(args, opts) end
      return assert(other, "fake sandbox: unexpected tool " .. tostring(args[1]))(args, opts)
    end
  end
  local sb, owner, log = fake_sandbox.new(handlers)
  local fs = fsmod.new({ e2b = owner }, config or { maxReadBytes = 1024, diffBasisMaxBytes = 100 })
  return fs, sb, log
end
local b64 = require("support.fake_http").core().b64encode
-- mbwrap read's answer: the stat line, then (a regular file within the limit) the content and
-- "\nend <n> <version after>\n".
local function vread(stat1, content, stat2)
  if not content then return stat1 end
  return stat1 .. content .. ("\nend %d %s\n"):format(#content, stat2 and stat2:match("(%S+)\n$") or "0:0:0:0:0")
end
-- mbwrap cat's process stream: the file's bytes in stdout frames (one data event per chunk).
local function cat_stream(chunks)
  local core = require "moonbox.core"
  local items = { { event = { start = { pid = 5 } } } }
  local lines = {}
  for _, c in ipairs(chunks) do
    items[#items + 1] = { event = { data = { stdout = core.b64encode("o" .. core.b64encode(c) .. "\n") } } }
  end
  items[#items + 1] = { event = { data = { stdout = core.b64encode("!exit 0\n!empty\n!done\n") } } }
  items[#items + 1] = { event = { ["end"] = { exited = true, status = "exit status 0" } } }
  return items
end
-- mbwrap list's answer for entries { kind, size, name, key }.
local function list_answer(entries)
  local out = {}
  for _, e in ipairs(entries) do
    out[#out + 1] = ("%s %d 1:1:1:1:1 %d %s %d %s\n"):format(e[1], e[2], #e[3], e[3], #e[4], e[4])
  end
  return table.concat(out)
end
local function count(log, kind)
  local n = 0
  for _, e in ipairs(log) do if not kind or e.kind == kind then n = n + 1 end end
  return n
end

describe("moonbox.fs (unit, scripted sandbox)", function()
  setup(function() mb = fake_mb.install(); fsmod = require "moonbox.fs.e2b" end)
  teardown(function() fake_mb.uninstall() end)

  describe("pure helpers", function()
    it("resolves lexically", function()
      assert.are.equal("/a/c", fsmod.lexical("b/../c", "/a"))
      assert.are.equal("/x", fsmod.lexical("/x/./", "/a"))
      assert.are.equal("/", fsmod.lexical("../..", "/a"))
    end)
    it("builds file URLs per segment", function()
      assert.are.equal("file:///w/a%20b/%C3%A9%23%3F%25", fsmod.file_url("/w/a b/\xC3\xA9#?%"))
      assert.are.equal("file:///w/line%0Abreak", fsmod.file_url("/w/line\nbreak"))
      assert.has_error(function() fsmod.file_url("rel") end)
    end)
    it("contains only itself and descendants", function()
      assert.is_true(fsmod.contains("/w", "/w")); assert.is_true(fsmod.contains("/w", "/w/a/b"))
      assert.is_false(fsmod.contains("/w", "/wx")); assert.is_true(fsmod.contains("/", "/etc"))
    end)
    it("parses mbwrap stat and publish output", function()
      assert.are.same({ type = "file", size = 12, mode = 420, version = "e2b:1:2:c:3:4" },
        fsmod.parse_stat("file 12 0644 1:2:c:3:4\n"))
      assert.are.equal(false, fsmod.parse_stat("absent\n"))
      assert.is_nil(fsmod.parse_stat("file 12\n"))
      local p = fsmod.parse_publish("before 3\na\nb\nok update 1:2\n")
      assert.are.equal("a\nb", p.before); assert.are.equal("update", p.operation); assert.are.equal("e2b:1:2", p.version)
      p = fsmod.parse_publish("before-absent\nok create 9:9\n")
      assert.is_nil(p.before); assert.are.equal("create", p.operation)
      p = fsmod.parse_publish("before-too-large 5000\nok update 9:9\n")
      assert.is_true(p.before_too_large)
      assert.is_nil(fsmod.parse_publish("before 10\nshort\nok update 1\n"))
      assert.is_nil(fsmod.parse_publish("ok update\n"))
    end)
  end)

  it("resolves with one realpath request against cwd", function()
    local fs, _, log = make{ tool = function(args) return "/home/user/real/a.txt" end }
    local t = mb.run(function() return assert(fs:resolve("link/../a.txt")) end)
    assert.are.equal("/home/user/real/a.txt", t.targetKey)
    assert.are.equal("/home/user/workspace/a.txt", t.displayPath)
    assert.are.equal(1, count(log))
    assert.are.same({ "realpath", "link/../a.txt", "/home/user/workspace" }, { table.unpack(log[1].args[1]) })
  end)

  it("rejects an empty path without a request", function()
    local fs, _, log = make{}
    local t, err = mb.run(function() return fs:resolve("  ") end)
    assert.is_nil(t); assert.are.equal("FS_NOT_FOUND", err.code); assert.are.equal(0, count(log))
  end)

  it("reports a file used as a directory as FS_NOT_FOUND", function()
    local fs = make{ tool = function() return tool_err("ENOTDIR", "not a directory '/w/f'") end }
    local _, err = mb.run(function() return fs:resolve("f/x") end)
    assert.are.equal("FS_NOT_FOUND", err.code)
  end)

  it("stat: absent is false, types and versions come from mbwrap stat -L", function()
    local answers = { "absent\n", "directory 4096 0755 1:2:3:4:5\n", "fifo 0 0644 1:3:0:1:1\n" }
    local fs, _, log = make{ tool = function() return table.remove(answers, 1) end }
    local t = { targetKey = "/w/a", displayPath = "/w/a" }
    mb.run(function()
      assert.are.equal(false, fs:stat(t))
      local d = assert(fs:stat(t))
      assert.are.equal("directory", d.type); assert.are.equal("e2b:1:2:3:4:5", d.version)
      assert.are.equal("other", assert(fs:stat(t)).type)
    end)
    assert.are.same({ "stat", "-L", "/w/a" }, { table.unpack(log[1].args[1]) })
  end)

  it("lstat does not follow and can report a symlink", function()
    local fs, _, log = make{ tool = function() return "symlink 5 0777 1:1:5:1:1\n" end }
    local info = mb.run(function() return assert(fs:lstat("ln")) end)
    assert.are.equal("symlink", info.type)
    assert.are.same({ "stat", "/home/user/workspace/ln" }, { table.unpack(log[1].args[1]) })
  end)

  local target = { targetKey = "/w/a.txt", displayPath = "/w/a.txt" }

  it("writes with two requests: staging upload next to the target, then publish", function()
    local fs, _, log = make{
      upload = function(path, data) return { { path = path } } end,
      tool = function(args) return "before 4\nold\n\nok update 7:8:9\n" end,
    }
    local out = mb.run(function() return assert(fs:writeText(target, "new\r\n")) end)
    assert.are.equal(2, count(log))
    local staging = log[1].args[1]
    assert.truthy(staging:match("^/w/%.moonbox%-%x+%.tmp/content$"), staging)
    assert.are.equal("new\r\n", log[1].args[2])
    assert.are.same({ "publish", "--before", "100", staging, "/w/a.txt" }, { table.unpack(log[2].args[1]) })
    assert.are.same({ operation = "update", version = "e2b:7:8:9", before = "old\n", after = "new\n" }, out)
  end)

  it("createIfAbsent publishes with --create-only and maps an existing target", function()
    local fs, _, log = make{
      upload = function(path) return { { path = path } } end,
      tool = function() return tool_err("FS_NOT_OBSERVED", "target already exists") end,
    }
    local r, err = mb.run(function() return fs:writeText(target, "x", { kind = "createIfAbsent" }) end)
    assert.is_nil(r); assert.are.equal("FS_NOT_OBSERVED", err.code)
    assert.are.equal("--create-only", log[2].args[1][2])
  end)

  it("replaceIfVersion passes the raw version to publish --expect", function()
    local fs, _, log = make{
      upload = function(path) return { { path = path } } end,
      tool = function() return tool_err("FS_STALE_VERSION", "file changed since it was read") end,
    }
    local r, err = mb.run(function() return fs:writeText(target, "x", { kind = "replaceIfVersion", version = "e2b:1:2" }) end)
    assert.is_nil(r); assert.are.equal("FS_STALE_VERSION", err.code)
    assert.are.same({ "publish", "--expect", "1:2", "--before", "100" }, { table.unpack(log[2].args[1], 1, 5) })
  end)

  it("gives no diff basis for a binary previous file", function()
    local fs = make{
      upload = function(path) return { { path = path } } end,
      tool = function() return "before 3\na\0b\nok update 1:1\n" end,
    }
    local out = mb.run(function() return assert(fs:writeText(target, "x")) end)
    assert.is_nil(out.before)
  end)

  it("removes the staging directory when the upload fails", function()
    local fs, _, log = make{
      upload = function() return nil, errors.new("E2B_NO_SPACE", "full") end,
      unary = function() return {} end,
    }
    local _, err = mb.run(function() return fs:writeText(target, "x") end)
    assert.are.equal("FS_IO_ERROR", err.code)
    assert.are.equal("filesystem.Filesystem/Remove", log[2].args[1])
    assert.truthy(log[2].args[2].path:match("^/w/%.moonbox%-%x+%.tmp$"))
  end)

  describe("cancellation and staging cleanup", function()
    local function staging_dir(log)
      for _, e in ipairs(log) do if e.kind == "upload" then return (e.args[1]:match("^(.*)/content$")) end end
    end
    local function removes(log)
      local out = {}
      for _, e in ipairs(log) do
        if e.kind == "unary" and e.args[1] == "filesystem.Filesystem/Remove" then out[#out + 1] = e.args[2].path end
      end
      return out
    end

    it("a cancel during publish never reports a committed write as aborted", function()
      local committed = false
      local fs, _, log = make{
        upload = function(path) return { { path = path } } end,
        tool = function()
          local ok, err = mb.sleep(10)                 -- the sandbox commits whatever the host does
          committed = true
          if not ok then return nil, err end
          return "ok update 7:7\n"
        end,
      }
      local r, err, pending = mb.run(function()
        local res = {}
        local w = mb.spawn(function()
          res.r, res.err = fs:writeText(target, "new")
          res.pending = mb.current().cancel_pending      -- the cancellation takes effect afterwards
        end)
        mb.sleep(5)
        w:cancel()
        mb.sleep(50)
        return res.r, res.err, res.pending
      end)
      assert.is_true(committed)
      assert.is_nil(err)
      assert.are.equal("e2b:7:7", r.version)
      assert.is_true(pending)
      assert.are.same({}, removes(log))
    end)

    it("a cancel that arrives before publication aborts without publishing and removes the staging dir", function()
      local writer
      local fs, _, log = make{
        upload = function(path) writer:cancel() return { { path = path } } end,
        unary = function() return {} end,
      }
      local r, err = mb.run(function()
        local res = {}
        writer = mb.spawn(function() res.r, res.err = fs:writeText(target, "new") end)
        mb.sleep(50)
        return res.r, res.err
      end)
      assert.is_nil(r); assert.are.equal("FS_ABORTED", err.code)
      assert.are.equal(0, count(log, "tool"))
      assert.are.same({ staging_dir(log) }, removes(log))
    end)

    it("a cancel during the upload lets it finish, then removes the staging dir and reports FS_ABORTED", function()
      local writer
      local fs, _, log = make{
        upload = function(path) assert(mb.sleep(20)) return { { path = path } } end,
        unary = function() assert(mb.sleep(10)) return {} end,
      }
      local err, removed = mb.run(function()
        local res = {}
        writer = mb.spawn(function() res.r, res.err = fs:writeText(target, "new") end)
        mb.sleep(5); writer:cancel()                   -- interrupts the upload
        mb.sleep(5); writer:cancel()                   -- and again, during the cleanup
        mb.sleep(50)
        return res.err
      end)
      assert.are.equal("FS_ABORTED", err.code)
      assert.are.equal(0, count(log, "tool"))
      assert.are.same({ staging_dir(log) }, removes(log))
    end)

    it("a failed publish (EACCES) removes the staging dir with one more request; a refused guard needs none", function()
      local answers = {
        function() return tool_err("FS_PERMISSION_DENIED", "cannot publish: Permission denied") end,
        function() return tool_err("FS_STALE_VERSION", "file changed since it was read") end,
      }
      local fs, _, log = make{
        upload = function(path) return { { path = path } } end,
        tool = function() return table.remove(answers, 1)() end,
        unary = function() return {} end,
      }
      mb.run(function()
        local _, e1 = fs:writeText(target, "x")
        assert.are.equal("FS_PERMISSION_DENIED", e1.code)
        assert.are.equal(3, count(log))
        local _, e2 = fs:writeText(target, "x", { kind = "replaceIfVersion", version = "e2b:1" })
        assert.are.equal("FS_STALE_VERSION", e2.code)
        assert.truthy(e2.message:find('"/w/a.txt"', 1, true), e2.message)
      end)
      assert.are.equal(5, count(log))                   -- upload + publish for the stale write
      local r = removes(log)
      assert.are.equal(1, #r)
      assert.truthy(r[1]:match("^/w/%.moonbox%-%x+%.tmp$"))
    end)
  end)

  it("names the path in FS_NOT_TEXT and FS_STALE_VERSION messages", function()
    local f3 = "file 3 0644 1:1:3:1:1\n"
    local reads = { vread(f3, "a\0b", f3), vread(f3, "a\0b", f3), vread("absent\n"), vread("file 3 0644 2:2:3:3:3\n", "xyz", "file 3 0644 2:2:3:3:3\n") }
    local fs = make{ tool = function() return f3 end,
      read = function() return table.remove(reads, 1) end }
    mb.run(function()
      local _, e1 = fs:readText(target)
      local _, e2 = fs:editText(target, { oldString = "a", newString = "b" })
      local _, e3 = fs:editText(target, { oldString = "a", newString = "b" })
      local _, e4 = fs:editText(target, { oldString = "a", newString = "b" }, { version = "e2b:1:1:3:1:1" })
      for _, e in ipairs({ e1, e2, e3, e4 }) do
        assert.truthy(e.message:find('"/w/a.txt"', 1, true), e.message)
      end
      assert.are.equal("FS_NOT_TEXT", e1.code); assert.are.equal("FS_NOT_TEXT", e2.code)
      assert.are.equal("FS_STALE_VERSION", e3.code); assert.are.equal("FS_STALE_VERSION", e4.code)
    end)
  end)

  it("streams without a byte ceiling (more than maxReadBytes): stat, then one mbwrap cat", function()
    local chunk = string.rep("z", 1000)
    local fs, _, log = make{
      tool = function() return "file 5000 0644 1:1:5000:1:1\n" end,
      stream = function(_, msg) assert.are.same({ "cat", "/w/a.txt" }, msg.process.args) return cat_stream{ chunk, chunk, chunk, chunk, chunk } end,
    }
    local n = mb.run(function()
      local it = assert(fs:streamText(target))
      local total = 0
      while true do
        local c, err = it.next()
        assert.is_nil(err)
        if not c then break end
        total = total + #c
      end
      return total
    end)
    assert.are.equal(5000, n)
    assert.are.equal(2, count(log))
  end)

  it("edits literally in three requests (versioned read, upload, publish), keeping CRLF", function()
    local st = "file 14 0644 1:1:e:5:5\n"
    local fs, _, log = make{
      read = function() return vread(st, "price: X\r\nok\r\n", st) end,
      tool = function() return "ok update 1:1:11:6:6\n" end,
      upload = function(path) return { { path = path } } end,
    }
    local out = mb.run(function() return assert(fs:editText(target, { oldString = "X", newString = "$&5" })) end)
    assert.are.equal(3, count(log))
    assert.are.same({ "read", "/w/a.txt", "1024" }, log[1].args[1])   -- at most maxReadBytes
    assert.are.equal("price: $&5\r\nok\r\n", log[2].args[2])
    assert.are.same({ "publish", "--expect", "1:1:e:5:5" }, { table.unpack(log[3].args[1], 1, 3) })
    assert.are.equal("price: X\nok\n", out.before); assert.are.equal("price: $&5\nok\n", out.after)
    assert.are.equal("e2b:1:1:11:6:6", out.version)
  end)

  it("edit: content that looks like the answer's own lines is taken by size, not by pattern", function()
    local body = "file 1 0644 9:9:9:9:9\n\nend 3 9:9:9:9:9\nX"
    local st = ("file %d 0644 1:1:1:1:1\n"):format(#body)
    local fs = make{ read = function() return vread(st, body, st) end,
      tool = function() return "ok update 2:2\n" end, upload = function(path) return { { path = path } } end }
    local out = mb.run(function() return assert(fs:editText(target, { oldString = "X", newString = "Y" })) end)
    assert.are.equal(body:sub(1, -2) .. "Y", out.after)
  end)

  it("edit: a file that changes while it is read is read again, then given up", function()
    local a, b = "file 3 0644 1:1:3:1:1\n", "file 3 0644 1:1:3:2:2\n"
    local reads = { vread(a, "abc", b), vread(b, "xbc", b) }
    local fs, _, log = make{ read = function() return table.remove(reads, 1) end,
      tool = function() return "ok update 3:3\n" end, upload = function(path) return { { path = path } } end }
    local out = mb.run(function() return assert(fs:editText(target, { oldString = "x", newString = "y" })) end)
    assert.are.equal("ybc", out.after)
    assert.are.equal("--expect", log[4].args[1][2]); assert.are.equal("1:1:3:2:2", log[4].args[1][3])
    local fs2 = make{ read = function() return vread(a, "abc", b) end }
    local _, err = mb.run(function() return fs2:editText(target, { oldString = "a", newString = "b" }) end)
    assert.are.equal("FS_IO_ERROR", err.code)
  end)

  it("edit: a file over maxReadBytes is FS_TOO_LARGE in one request", function()
    local fs, _, log = make{ read = function() return vread("file 5000 0644 1:1:1:1:1\n") end }
    local _, err = mb.run(function() return fs:editText(target, { oldString = "a", newString = "b" }) end)
    assert.are.equal("FS_TOO_LARGE", err.code); assert.are.equal(1, count(log))
  end)

  it("edit: a stale guard fails in one request", function()
    local st = "file 3 0644 2:2:3:3:3\n"
    local fs, _, log = make{ read = function() return vread(st, "abc", st) end }
    local _, err = mb.run(function() return fs:editText(target, { oldString = "a", newString = "b" }, { version = "e2b:1:1:1:1:1" }) end)
    assert.are.equal("FS_STALE_VERSION", err.code); assert.are.equal(1, count(log))
  end)

  it("edit: a missing target is stale, a directory is not regular", function()
    local answers = { vread("absent\n"), vread("directory 4096 0755 1:1:1:1:1\n") }
    local fs = make{ read = function() return table.remove(answers, 1) end }
    mb.run(function()
      local _, e1 = fs:editText(target, { oldString = "a", newString = "b" })
      local _, e2 = fs:editText(target, { oldString = "a", newString = "b" })
      assert.are.equal("FS_STALE_VERSION", e1.code); assert.are.equal("FS_NOT_REGULAR_FILE", e2.code)
    end)
  end)

  it("remove, mkdir and rename: one tool request each on the display paths, flags from the options", function()
    local answers = { "ok directory\n", "ok file\n", "ok created 1:2:0:3:4\n", "ok existed 1:2:0:3:5\n",
      "ok symlink 1:9:3:3:3\n", "ok file 1:7:1:1:1\n" }
    local fs, _, log = make{ tool = function() return table.remove(answers, 1) end }
    local via = { targetKey = "/real/d", displayPath = "/w/link" }
    local other = { targetKey = "/w/b", displayPath = "/w/b" }
    mb.run(function()
      assert.are.same({ type = "directory" }, assert(fs:remove(via, { recursive = true })))
      assert.are.same({ type = "file" }, assert(fs:remove(other, { recursive = false })))
      assert.are.same({ created = true, version = "e2b:1:2:0:3:4" }, assert(fs:mkdir(via, { parents = true })))
      assert.are.same({ created = false, version = "e2b:1:2:0:3:5" }, assert(fs:mkdir(other)))
      assert.are.same({ type = "symlink", version = "e2b:1:9:3:3:3" }, assert(fs:rename(via, other, { noReplace = true })))
      assert.are.same({ type = "file", version = "e2b:1:7:1:1:1" }, assert(fs:rename(other, via)))
    end)
    assert.are.equal(6, count(log))
    local want = { { "remove", "-r", "/w/link" }, { "remove", "/w/b" }, { "mkdir", "-p", "/w/link" }, { "mkdir", "/w/b" },
      { "rename", "--no-replace", "/w/link", "/w/b" }, { "rename", "/w/b", "/w/link" } }
    for i, w in ipairs(want) do assert.are.same(w, { table.unpack(log[i].args[1]) }) end
  end)

  it("remove, mkdir and rename: tool codes pass through naming the paths; malformed answers are FS_IO_ERROR", function()
    local answers = {
      function() return tool_err("FS_NOT_EMPTY", "the directory is not empty") end,
      function() return tool_err("FS_ALREADY_EXISTS", "it already exists") end,
      function() return tool_err("FS_ALREADY_EXISTS", "the destination exists") end,
      function() return tool_err("FS_CROSS_DEVICE", "source and destination are on different file systems") end,
      function() return "ok\n" end, function() return "ok created\n" end, function() return "okay file 1\n" end,
    }
    local fs = make{ tool = function() return table.remove(answers, 1)() end }
    local a, b = { targetKey = "/w/a", displayPath = "/w/a" }, { targetKey = "/w/b", displayPath = "/w/b" }
    mb.run(function()
      local _, e = fs:remove(a)
      assert.are.equal("FS_NOT_EMPTY", e.code); assert.are.equal('cannot remove "/w/a": the directory is not empty', e.message)
      _, e = fs:mkdir(a)
      assert.are.equal("FS_ALREADY_EXISTS", e.code); assert.are.equal('cannot make directory "/w/a": it already exists', e.message)
      _, e = fs:rename(a, b, { noReplace = true })
      assert.are.equal("FS_ALREADY_EXISTS", e.code)
      assert.are.equal('cannot rename "/w/a" to "/w/b": the destination exists', e.message)
      assert.are.equal("FS_CROSS_DEVICE", select(2, fs:rename(a, b)).code)
      assert.are.equal("FS_IO_ERROR", select(2, fs:remove(a)).code)
      assert.are.equal("FS_IO_ERROR", select(2, fs:mkdir(a)).code)
      assert.are.equal("FS_IO_ERROR", select(2, fs:rename(a, b)).code)
    end)
  end)

  it("writeBytes: the write path without a diff basis; writeText refuses non-text before any request", function()
    local fs, _, log = make{
      upload = function(path) return { { path = path } } end,
      tool = function() return "ok create 7:8:9\n" end,
    }
    local out = mb.run(function() return assert(fs:writeBytes(target, "\0\255", { kind = "createIfAbsent" })) end)
    assert.are.same({ operation = "create", version = "e2b:7:8:9" }, out)
    assert.are.equal("\0\255", log[1].args[2])
    assert.are.same({ "publish", "--create-only", log[1].args[1], "/w/a.txt" }, { table.unpack(log[2].args[1]) })
    local _, err = mb.run(function() return fs:writeText(target, "\0\255") end)
    assert.are.equal("FS_NOT_TEXT", err.code)
    assert.are.equal(2, count(log))
  end)

  it("raises for a path string where a target belongs, naming it", function()
    local fs, _, log = make{}
    for _, op in ipairs({ "stat", "readText", "readBytes", "streamText", "listDir", "writeText", "editText", "fileUrl", "processPath",
      "writeBytes", "remove", "mkdir", "rename", "watch" }) do
      local ok, err = pcall(mb.run, function() return fs[op](fs, "/etc/passwd", 10, {}) end)
      assert.is_false(ok, op)
      assert.truthy(tostring(err):find((op == "rename" and "fs:rename (from)" or ("fs:" .. op)) .. ': expected a target from fs:resolve(path), got string "/etc/passwd"', 1, true), tostring(err))
    end
    assert.are.equal(0, count(log))
  end)

  it("readBytes refuses a known size over the cap in its one request", function()
    local fs, _, log = make{ read = function(args)
      assert.are.same({ "read", "/w/a.txt", "10" }, args)
      return vread("file 11 0644 1:1:11:1:1\n")
    end }
    local _, err = mb.run(function() return fs:readBytes(target, 10) end)
    assert.are.equal("FS_TOO_LARGE", err.code); assert.are.equal(1, count(log))
  end)

  it("readText: one request; binary and invalid UTF-8 are FS_NOT_TEXT; absence and directories", function()
    local f = "file 6 0644 1:1:6:1:1\n"
    local answers = { vread(f, "hello\n", f), vread(f, "a\0b", f), vread(f, "\xFF", f), vread("absent\n"),
      vread("directory 4096 0755 1:1:1:1:1\n") }
    local fs, _, log = make{ read = function() return table.remove(answers, 1) end }
    mb.run(function()
      assert.are.equal("hello\n", fs:readText(target))
      assert.are.equal(1, count(log))
      assert.are.equal("FS_NOT_TEXT", select(2, fs:readText(target)).code)
      assert.are.equal("FS_NOT_TEXT", select(2, fs:readText(target)).code)
      assert.are.equal("FS_NOT_FOUND", select(2, fs:readText(target)).code)
      assert.are.equal("FS_NOT_REGULAR_FILE", select(2, fs:readText(target)).code)
    end)
  end)

  it("listDir: one mbwrap list; sorted, symlinks resolved, cheap metadata", function()
    local fs, _, log = make{
      tool = function(args)
        assert.are.same({ "list", "/w" }, args)
        return list_answer{ { "file", 3, "z", "/w/z" }, { "directory", 4096, "d", "/w/d" },
          { "file", 9, "ln", "/etc/hosts" }, { "other", 7, "broken", "/w/broken" }, { "file", 2, "a\nb", "/w/a\nb" } }
      end,
    }
    local list = mb.run(function() return assert(fs:listDir({ targetKey = "/w", displayPath = "/show" })) end)
    assert.are.equal(1, count(log))
    local names = {}
    for i, e in ipairs(list) do names[i] = e.name end
    assert.are.same({ "a\nb", "broken", "d", "ln", "z" }, names)
    assert.are.equal("other", list[2].type)
    assert.are.equal("/etc/hosts", list[4].target.targetKey); assert.are.equal("/show/ln", list[4].target.displayPath)
    assert.are.equal(3, list[5].size); assert.is_nil(list[3].size)
    assert.are.equal("e2b:1:1:1:1:1", list[5].version)
  end)

  it("listDir: a file is FS_NOT_DIRECTORY, absence FS_NOT_FOUND, EACCES FS_PERMISSION_DENIED", function()
    local answers = { { "ENOTDIR", "cannot list '/w/a.txt': Not a directory" }, { "ENOENT", "cannot list: No such file" },
      { "EACCES", "cannot list: Permission denied" } }
    local fs = make{ tool = function() local a = table.remove(answers, 1) return tool_err(a[1], a[2]) end }
    mb.run(function()
      assert.are.equal("FS_NOT_DIRECTORY", select(2, fs:listDir(target)).code)
      assert.are.equal("FS_NOT_FOUND", select(2, fs:listDir(target)).code)
      assert.are.equal("FS_PERMISSION_DENIED", select(2, fs:listDir(target)).code)
    end)
  end)

  it("serializes mutations of one target", function()
    local order = {}
    local fs = make{
      upload = function(path, data) order[#order + 1] = "upload " .. data; mb.sleep(10) return { { path = path } } end,
      tool = function(args) mb.sleep(10); order[#order + 1] = "publish"; return "ok update 1:1\n" end,
    }
    mb.run(function()
      local a = mb.spawn(function() assert(fs:writeText(target, "A")) end)
      local b = mb.spawn(function() assert(fs:writeText(target, "B")) end)
      mb.sleep(100)
    end)
    assert.are.same({ "upload A", "publish", "upload B", "publish" }, order)
  end)

  it("streams text across chunk boundaries", function()
    local fs = make{
      tool = function() return "file 5 0644 1:1:5:1:1\n" end,
      stream = function() return cat_stream{ "x\xE2", "\x82\xAC", "y" } end,
    }
    local got = mb.run(function()
      local it = assert(fs:streamText(target))
      local out = {}
      while true do
        local c, err = it.next()
        assert.is_nil(err)
        if not c then break end
        out[#out + 1] = c
      end
      return table.concat(out)
    end)
    assert.are.equal("x\xE2\x82\xACy", got)
  end)
end)
