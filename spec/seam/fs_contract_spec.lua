-- Filesystem seam contract (reference §1, §4.1, §6.7 without its defects, §8 as regressions).
-- Provider-agnostic: everything goes through ctx.fs, and ctx.subprocess for ground truth.
local P = require "seam.provider"

describe("fs seam contract #sandboxd", function()
  local fs, dir
  setup(function()
    local s = P.open()
    fs = s.ctx.fs
    dir = P.scratch("fs")
    P.run(function() assert(select(2, P.sh("mkdir -p '" .. dir .. "'")) == 0) end)
  end)
  teardown(function() P.close() end)

  local function T(path) return assert(fs:resolve(path, { cwd = dir })) end

  describe("resolve", function()
    it("gives one targetKey for one file through different paths", function()
      P.run(function()
        assert(select(2, P.sh("mkdir -p sub && echo x > sub/f && ln -s sub link", { cwd = dir })) == 0)
        local a, b, c = T("sub/f"), T("link/f"), T(dir .. "/sub/../sub/./f")
        assert.are.equal(a.targetKey, b.targetKey); assert.are.equal(a.targetKey, c.targetKey)
        assert.are.equal(dir .. "/link/f", b.displayPath)
      end)
    end)
    it("resolves a missing target under an existing parent", function()
      P.run(function()
        local t = T("link/missing/deeper.txt")
        assert.are.equal(dir .. "/sub/missing/deeper.txt", t.targetKey)
      end)
    end)
    it("keeps newline and multibyte names intact", function()
      P.run(function()
        local name = "na\nme-\xC3\xA9"
        local t = T(name)
        assert.are.equal(dir .. "/" .. name, t.targetKey)
        assert.are.equal("file://" .. dir:gsub(" ", "%%20") .. "/na%0Ame-%C3%A9", fs:fileUrl(t))
      end)
    end)
    it("rejects empty paths and files used as directories with FS_NOT_FOUND", function()
      P.run(function()
        assert.are.equal("FS_NOT_FOUND", select(2, fs:resolve("")).code)
        assert.are.equal("FS_NOT_FOUND", select(2, fs:resolve("sub/f/x", { cwd = dir })).code)
      end)
    end)
    it("processPath is the canonical path and contains follows it", function()
      P.run(function()
        local root, f = T("."), T("link/f")
        assert.are.equal(dir .. "/sub/f", fs:processPath(f))
        assert.is_true(fs:contains(root, f)); assert.is_true(fs:contains(root, root))
        assert.is_false(fs:contains(f, root))
      end)
    end)
  end)

  describe("stat / lstat", function()
    it("reports absence, types and file sizes", function()
      P.run(function()
        assert(select(2, P.sh("printf 12345 > five && mkfifo pipe", { cwd = dir })) == 0)
        assert.are.equal(false, fs:stat(T("nothing")))
        local f = assert(fs:stat(T("five")))
        assert.are.equal("file", f.type); assert.are.equal(5, f.size); assert.is_string(f.version)
        assert.are.equal("directory", assert(fs:stat(T("sub"))).type)
        assert.are.equal("other", assert(fs:stat(T("pipe"))).type)
        assert.are.equal("symlink", assert(fs:lstat("link", { cwd = dir })).type)
        assert.are.equal("directory", assert(fs:stat(T("link"))).type)
      end)
    end)
  end)

  describe("reads", function()
    it("reads text, refuses binary, invalid UTF-8, directories and missing files", function()
      P.run(function()
        assert(select(2, P.sh("printf 'h\\303\\251\\n' > ok; printf 'a\\000b' > bin; printf '\\377' > bad", { cwd = dir })) == 0)
        assert.are.equal("h\xC3\xA9\n", fs:readText(T("ok")))
        assert.are.equal("FS_NOT_TEXT", select(2, fs:readText(T("bin"))).code)
        assert.are.equal("FS_NOT_TEXT", select(2, fs:readText(T("bad"))).code)
        assert.are.equal("FS_NOT_REGULAR_FILE", select(2, fs:readText(T("sub"))).code)
        assert.are.equal("FS_NOT_FOUND", select(2, fs:readText(T("none"))).code)
      end)
    end)
    it("streams the same text as readText across chunks", function()
      P.run(function()
        assert(select(2, P.sh("i=0; while [ $i -lt 200000 ]; do printf '\\342\\202\\254%d\\n' $i; i=$((i+1)); done > big", { cwd = dir })) == 0)
        local whole = assert(fs:readText(T("big")))
        local it = assert(fs:streamText(T("big")))
        local parts = {}
        while true do
          local c, err = it.next()
          assert.is_nil(err)
          if not c then break end
          assert.truthy(utf8.len(c), "chunk split a character")
          parts[#parts + 1] = c
        end
        assert.are.equal(whole, table.concat(parts))
        assert.is_true(#parts > 1)
      end)
    end)
    it("readBytes caps inclusively with FS_TOO_LARGE", function()
      P.run(function()
        assert(select(2, P.sh("printf 0123456789 > ten", { cwd = dir })) == 0)
        assert.are.equal("0123456789", fs:readBytes(T("ten"), 10))
        assert.are.equal("FS_TOO_LARGE", select(2, fs:readBytes(T("ten"), 9)).code)
      end)
    end)
  end)

  describe("listDir", function()
    it("lists direct children in name order with resolved targets", function()
      P.run(function()
        local d = dir .. "/ls"
        assert(select(2, P.sh("mkdir -p ls/c && cd ls && printf x > b && ln -s b a && ln -s nowhere z", { cwd = dir })) == 0)
        local list = assert(fs:listDir(T(d)))
        local seen = {}
        for i, e in ipairs(list) do seen[i] = e.name .. ":" .. e.type end
        assert.are.same({ "a:file", "b:file", "c:directory", "z:other" }, seen)
        assert.are.equal(d .. "/b", list[1].target.targetKey)
        assert.are.equal(1, list[2].size)
      end)
    end)
    it("reports FS_NOT_DIRECTORY and FS_NOT_FOUND", function()
      P.run(function()
        assert.are.equal("FS_NOT_DIRECTORY", select(2, fs:listDir(T("five"))).code)
        assert.are.equal("FS_NOT_FOUND", select(2, fs:listDir(T("nodir"))).code)
      end)
    end)
  end)

  describe("writeText", function()
    it("creates with mode 0600 and parents, replaces keeping the mode", function()
      P.run(function()
        local t = T("w/new/deep.txt")
        local out = assert(fs:writeText(t, "one\r\n"))
        assert.are.equal("create", out.operation); assert.is_nil(out.before); assert.are.equal("one\n", out.after)
        assert.are.equal("600\n", P.sh("stat -c %a w/new/deep.txt", { cwd = dir }))
        P.sh("chmod 751 w/new/deep.txt", { cwd = dir })
        local out2 = assert(fs:writeText(t, "two"))
        assert.are.equal("update", out2.operation); assert.are.equal("one\n", out2.before)
        assert.are.equal("751\n", P.sh("stat -c %a w/new/deep.txt", { cwd = dir }))
        assert.are.equal("two", P.sh("cat w/new/deep.txt", { cwd = dir }))
      end)
    end)
    it("changes the version on every write of its own and on an external replacement", function()
      P.run(function()
        local t = T("ver.txt")
        local a = assert(fs:writeText(t, "aaaa")).version
        local b = assert(fs:writeText(t, "bbbb")).version
        assert.are_not.equal(a, b)
        assert.are.equal(b, assert(fs:stat(t)).version)
        P.sh("printf cccc > ver.txt.tmp && mv ver.txt.tmp ver.txt", { cwd = dir })   -- external same-size rewrite
        assert.are_not.equal(b, assert(fs:stat(t)).version)
      end)
    end)
    -- Two same-size in-place rewrites of one inode within one millisecond, each observed (fstat)
    -- right after it by a tiny C program in the sandbox that prints the version in mbwrap's format
    -- (checked against fs:stat) and the mtime in ms, which is all a JS-style token
    -- (size, mode, ms mtime) sees. Runs until a pair lands in the same millisecond.
    it("changes the version on same-size in-place rewrites within one millisecond", function()
      P.run(function()
        local _, cc = P.sh("command -v cc >/dev/null")
        if cc ~= 0 then return pending("no C compiler in the sandbox") end
        local src = [[
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
static void ver(int fd) {
  struct stat st;
  if (fstat(fd, &st)) _exit(4);
  printf("%lx:%lx:%lx:%llx:%llx %lld\n", (unsigned long)st.st_dev, (unsigned long)st.st_ino,
         (unsigned long)st.st_size,
         (unsigned long long)st.st_mtim.tv_sec * 1000000000ull + (unsigned long long)st.st_mtim.tv_nsec,
         (unsigned long long)st.st_ctim.tv_sec * 1000000000ull + (unsigned long long)st.st_ctim.tv_nsec,
         (long long)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000);
}
int main(int argc, char **argv) {
  int fd = open(argv[1], O_RDWR);
  if (argc != 2 || fd < 0) return 2;
  for (int i = 0; i < 20; i++) {
    if (pwrite(fd, i % 2 ? "dddd" : "cccc", 4, 0) != 4) return 3;
    ver(fd);
  }
  return 0;
}
]]
        local t = T("inplace.txt")
        assert(fs:writeText(t, "aaaa"))
        local out, code, err = P.sh("cat > inplace.c && cc -O2 -o inplace inplace.c && ./inplace inplace.txt",
          { cwd = dir, stdin = src })
        assert.are.equal(0, code, err)
        local rows = {}
        for v, ms in out:gmatch("(%S+) (%d+)\n") do rows[#rows + 1] = { v = v, ms = ms } end
        assert.are.equal(20, #rows)
        assert.are.equal("e2b:" .. rows[#rows].v, assert(fs:stat(t)).version)   -- same format as the provider's
        local same_ms = 0
        for i = 2, #rows do
          assert.are_not.equal(rows[i - 1].v, rows[i].v)
          if rows[i - 1].ms == rows[i].ms then same_ms = same_ms + 1 end   -- a ms token would not differ
        end
        assert.is_true(same_ms > 0, "no two rewrites fell in one millisecond")
      end)
    end)
    it("createIfAbsent never replaces", function()
      P.run(function()
        local t = T("once.txt")
        assert.are.equal("create", assert(fs:writeText(t, "first", { kind = "createIfAbsent" })).operation)
        local r, err = fs:writeText(t, "second", { kind = "createIfAbsent" })
        assert.is_nil(r); assert.are.equal("FS_NOT_OBSERVED", err.code)
        assert.are.equal("first", fs:readText(t))
      end)
    end)
    it("replaceIfVersion rejects a stale or missing target", function()
      P.run(function()
        local t = T("guard.txt")
        local v1 = assert(fs:writeText(t, "v1")).version
        local v2 = assert(fs:writeText(t, "v2", { kind = "replaceIfVersion", version = v1 })).version
        assert.are.equal("FS_STALE_VERSION", select(2, fs:writeText(t, "v3", { kind = "replaceIfVersion", version = v1 })).code)
        assert.are.equal("v2", fs:readText(t))
        assert.are.equal("FS_STALE_VERSION", select(2, fs:writeText(T("gone.txt"), "x", { kind = "replaceIfVersion", version = v2 })).code)
      end)
    end)
    local function no_staging(where)
      local out, code = P.sh("ls -A", { cwd = where })
      assert.are.equal(0, code)
      assert.is_nil(out:find(".moonbox-", 1, true), where .. " holds " .. out)
    end
    it("refuses to write over a directory and leaves no staging behind", function()
      P.run(function()
        assert.are.equal("FS_NOT_REGULAR_FILE", select(2, fs:writeText(T("sub"), "x")).code)
        no_staging(dir)
      end)
    end)
    it("leaves no staging behind when a guard rejects a write to a file", function()
      P.run(function()
        local t = T("guarded-file.txt")
        local v = assert(fs:writeText(t, "one")).version
        assert(fs:writeText(t, "two"))
        assert.are.equal("FS_STALE_VERSION", select(2, fs:writeText(t, "x", { kind = "replaceIfVersion", version = v })).code)
        assert.are.equal("FS_NOT_OBSERVED", select(2, fs:writeText(t, "x", { kind = "createIfAbsent" })).code)
        assert.are.equal("FS_STALE_VERSION", select(2, fs:editText(t, { oldString = "two", newString = "x" }, { version = v })).code)
        assert.are.equal("two", fs:readText(t))
        no_staging(dir)
      end)
    end)
    -- Permissions are the world's user's (root bypasses them: the matrix runs the host cell as
    -- an unprivileged user; run as root these are pending).
    local function as_root() return P.run(function() return P.sh("id -u") end) == "0\n" end
    it("reports EACCES as FS_PERMISSION_DENIED and leaves no staging in a directory it may not write", function()
      if as_root() then return pending("the world's user is root: no permission is ever denied") end
      P.run(function()
        local d = dir .. "/locked"
        assert.are.equal(0, select(2, P.sh("mkdir -p locked && printf keep > locked/f && chmod 555 locked", { cwd = dir })))
        local _, e1 = fs:writeText(T("locked/f"), "x")
        local _, e2 = fs:writeText(T("locked/new"), "x", { kind = "createIfAbsent" })
        local _, e3 = fs:writeText(T("/etc/moonbox-denied.txt"), "x")
        for _, e in ipairs({ e1, e2, e3 }) do assert.are.equal("FS_PERMISSION_DENIED", e and e.code) end
        assert.are.equal("keep", fs:readText(T("locked/f")))
        no_staging(d)
        no_staging("/etc")
        P.sh("chmod 755 locked", { cwd = dir })
      end)
    end)
    it("reports an edit or read in a directory it may not enter as FS_PERMISSION_DENIED", function()
      if as_root() then return pending("the world's user is root: no permission is ever denied") end
      P.run(function()
        assert.are.equal(0, select(2, P.sh("mkdir -p sealed && printf keep > sealed/f", { cwd = dir })))
        local t = T("sealed/f")   -- resolved while it can be, then sealed
        assert.are.equal(0, select(2, P.sh("chmod 000 sealed", { cwd = dir })))
        local _, e1 = fs:editText(t, { oldString = "keep", newString = "x" })
        local _, e2 = fs:readText(t)
        P.sh("chmod 755 sealed", { cwd = dir })
        assert.are.equal("FS_PERMISSION_DENIED", e1 and e1.code)
        assert.matches("sealed/f", e1.message, 1, true)
        assert.are.equal("FS_PERMISSION_DENIED", e2 and e2.code)
        assert.are.equal("keep", fs:readText(t))
      end)
    end)
    -- Parity: ctx.fs answers as the world's user, whatever privileges its transport has (envd
    -- serves files as root).
    it("refuses what the world's user may not read or list: a mode-000 file and directory", function()
      if as_root() then return pending("the world's user is root: no permission is ever denied") end
      P.run(function()
        assert.are.equal(0, select(2, P.sh("mkdir -p nope && printf secret > nope.txt && chmod 000 nope nope.txt", { cwd = dir })))
        local _, e1 = fs:readText(T("nope.txt"))
        local _, e2 = fs:readBytes(T("nope.txt"), 100)
        local it, e3 = fs:streamText(T("nope.txt"))
        if it then local _, e = it.next(); e3 = e end
        local _, e4 = fs:listDir(T("nope"))
        P.sh("chmod 755 nope && chmod 644 nope.txt", { cwd = dir })
        for i, e in ipairs({ e1, e2, e3, e4 }) do
          assert.are.equal("FS_PERMISSION_DENIED", e and e.code, "case " .. i .. ": " .. tostring(e))
        end
        -- and what the user's own commands see agrees
        local _, code = P.sh("chmod 000 nope.txt && cat nope.txt; r=$?; chmod 644 nope.txt; exit $r", { cwd = dir })
        assert.are_not.equal(0, code)
      end)
    end)
    -- Cancellation at every point of a write (k loop iterations after it starts): the outcome is
    -- either FS_ABORTED with the old content or success with the new content, never "aborted"
    -- with the new content, and no staging directory is ever left.
    it("never reports a committed write as aborted, and an aborted write leaves nothing", function()
      P.run(function()
        local mb = require "moonbox"
        local t = T("cancel.txt")
        local seen = { ok = 0, aborted = 0 }
        -- how many loop iterations an uncancelled write takes, to spread the cancel points over it
        assert(fs:writeText(t, "base"))
        local probe = mb.spawn(function() assert(fs:writeText(t, "probe")) end)
        local n = 0
        while not probe:done() do mb.sleep(0); n = n + 1 end
        local step = math.max(1, n // 60)
        for k = 0, n + step, step do
          assert(fs:writeText(t, "base"))
          local res = {}
          local w = mb.spawn(function() res.r, res.err = fs:writeText(t, "v" .. k) end)
          -- Stop early once the write is over: a slow probe (a noisy machine) must not multiply
          -- the spec's run time, and a cancel after completion is simply a completed write.
          for _ = 1, k do
            if w:done() then break end
            mb.sleep(0)
          end
          w:cancel()
          assert(w:join(30000))
          local now = assert(fs:readText(t))
          if res.r then
            assert.are.equal("v" .. k, now); seen.ok = seen.ok + 1
          else
            assert.are.equal("FS_ABORTED", res.err.code, tostring(res.err))
            assert.are.equal("base", now, "aborted at " .. k .. " but committed"); seen.aborted = seen.aborted + 1
          end
        end
        no_staging(dir)
        assert.is_true(seen.ok > 0 and seen.aborted > 0, ("ok %d, aborted %d"):format(seen.ok, seen.aborted))
      end, 180000)
    end)
    it("keeps its runtime files out of the workspace", function()
      P.run(function()
        local list = assert(fs:listDir(T(P.open().cwd)))
        for _, e in ipairs(list) do assert.is_nil(e.name:find("moonbox", 1, true)) end
      end)
    end)
  end)

  describe("editText", function()
    it("inserts $ patterns literally and keeps CRLF", function()
      P.run(function()
        local t = T("edit.txt")
        assert(fs:writeText(t, "price: X\r\nok\r\n"))
        local out = assert(fs:editText(t, { oldString = "X", newString = "$&5 $1 $$ %1" }))
        assert.are.equal("price: X\nok\n", out.before)
        assert.are.equal("price: $&5 $1 $$ %1\nok\n", out.after)
        assert.are.equal("price: $&5 $1 $$ %1\r\nok\r\n", fs:readBytes(t, 1000))
      end)
    end)
    it("reports the edit errors", function()
      P.run(function()
        local t = T("edit2.txt")
        local v = assert(fs:writeText(t, "a a b")).version
        assert.are.equal("FS_AMBIGUOUS_EDIT", select(2, fs:editText(t, { oldString = "a", newString = "c" })).code)
        assert.are.equal("FS_EDIT_NOT_FOUND", select(2, fs:editText(t, { oldString = "zz", newString = "c" })).code)
        assert.are.equal("FS_EDIT_NOT_FOUND", select(2, fs:editText(t, { oldString = "", newString = "c" })).code)
        assert.are.equal("c c b", assert(fs:editText(t, { oldString = "a", newString = "c", replaceAll = true }, { version = v })).after)
        assert.are.equal("FS_STALE_VERSION", select(2, fs:editText(t, { oldString = "b", newString = "d" }, { version = v })).code)
        assert.are.equal("FS_STALE_VERSION", select(2, fs:editText(T("absent.txt"), { oldString = "a", newString = "b" })).code)
      end)
    end)
    it("serializes concurrent edits of one file", function()
      P.run(function()
        local mb = require "moonbox"
        local t = T("count.txt")
        assert(fs:writeText(t, "A B C D"))
        local tasks = {}
        for _, w in ipairs({ "A", "B", "C", "D" }) do
          tasks[#tasks + 1] = mb.spawn(function() return assert(fs:editText(t, { oldString = w, newString = w:lower() })) end)
        end
        for _, k in ipairs(tasks) do assert(k:join(30000)) end
        assert.are.equal("a b c d", fs:readText(t))
      end)
    end)
  end)

  describe("writeText refuses what readText would refuse", function()
    it("refuses a NUL and invalid UTF-8 with FS_NOT_TEXT naming the path, writing nothing", function()
      P.run(function()
        local t = T("nottext/new.txt")
        local r, err = fs:writeText(t, "a\0b")
        assert.is_nil(r); assert.are.equal("FS_NOT_TEXT", err.code)
        assert.truthy(err.message:find(t.displayPath, 1, true), err.message)
        assert.truthy(err.message:find("NUL byte at byte 2", 1, true), err.message)
        local _, err2 = fs:writeText(t, "ok \xC3\x28")
        assert.are.equal("FS_NOT_TEXT", err2.code)
        assert.truthy(err2.message:find("invalid UTF-8 at byte 4", 1, true), err2.message)
        assert.truthy(err2.message:find(t.displayPath, 1, true), err2.message)
        assert.are.equal(false, fs:stat(t))
        assert.are.equal(false, fs:stat(T("nottext")))   -- not even the parents
        -- an existing file keeps its content
        local e = T("keeps.txt")
        assert(fs:writeText(e, "kept"))
        assert.are.equal("FS_NOT_TEXT", select(2, fs:writeText(e, "\xFF", { kind = "replaceIfVersion",
          version = assert(fs:stat(e)).version })).code)
        assert.are.equal("kept", fs:readText(e))
      end)
    end)
    it("writes what readText reads back: a NUL past readText's sample round-trips", function()
      P.run(function()
        local t = T("latenul.txt")
        local body = ("a"):rep(9000) .. "\0z"
        assert(fs:writeText(t, body))
        assert.are.equal(body, fs:readText(t))
        local early = T("earlynul.txt")
        assert(fs:writeBytes(early, ("a"):rep(100) .. "\0"))
        assert.are.equal("FS_NOT_TEXT", select(2, fs:readText(early)).code)
        assert.are.equal("FS_NOT_TEXT", select(2, fs:writeText(early, ("a"):rep(100) .. "\0")).code)
      end)
    end)
    it("editText refuses a result that is not text", function()
      P.run(function()
        local t = T("edit-nul.txt")
        assert(fs:writeText(t, "one two"))
        local _, err = fs:editText(t, { oldString = "two", newString = "t\0o" })
        assert.are.equal("FS_NOT_TEXT", err and err.code)
        assert.truthy(err.message:find(t.displayPath, 1, true), err.message)
        assert.are.equal("FS_NOT_TEXT", select(2, fs:editText(t, { oldString = "one", newString = "\xE2\x82" })).code)
        assert.are.equal("one two", fs:readText(t))
      end)
    end)
  end)

  describe("writeBytes", function()
    it("round-trips all 256 byte values, creating with mode 0600 and keeping the mode", function()
      P.run(function()
        local all = {}
        for b = 0, 255 do all[#all + 1] = string.char(b) end
        local bytes = table.concat(all)
        local t = T("wb/all.bin")
        local out = assert(fs:writeBytes(t, bytes))
        assert.are.equal("create", out.operation)
        assert.are.equal(out.version, assert(fs:stat(t)).version)
        assert.are.equal(bytes, fs:readBytes(t, 1000))
        -- ground truth from the world's own tools: 256 bytes, 0..255 in order
        local od = P.sh("od -An -v -tu1 wb/all.bin", { cwd = dir })
        local n = 0
        for v in od:gmatch("%d+") do assert.are.equal(n, tonumber(v)); n = n + 1 end
        assert.are.equal(256, n)
        assert.are.equal("600\n", P.sh("stat -c %a wb/all.bin", { cwd = dir }))
        P.sh("chmod 640 wb/all.bin", { cwd = dir })
        local big = bytes:rep(4096) .. "\r\n\0"     -- 1 MiB and a little, CRLF kept as it is
        local out2 = assert(fs:writeBytes(t, big))
        assert.are.equal("update", out2.operation); assert.are_not.equal(out.version, out2.version)
        assert.is_nil(out2.before); assert.is_nil(out2.after)
        assert.are.equal(big, fs:readBytes(t, #big))
        assert.are.equal("640\n", P.sh("stat -c %a wb/all.bin", { cwd = dir }))
      end)
    end)
    it("has writeText's guards, and refuses a directory leaving no staging", function()
      P.run(function()
        local t = T("wb/guard.bin")
        local v1 = assert(fs:writeBytes(t, "\0\1", { kind = "createIfAbsent" })).version
        assert.are.equal("FS_NOT_OBSERVED", select(2, fs:writeBytes(t, "\2", { kind = "createIfAbsent" })).code)
        local v2 = assert(fs:writeBytes(t, "\3", { kind = "replaceIfVersion", version = v1 })).version
        assert.are.equal("FS_STALE_VERSION", select(2, fs:writeBytes(t, "\4", { kind = "replaceIfVersion", version = v1 })).code)
        assert.are.equal("\3", fs:readBytes(t, 10))
        assert.are.equal("FS_STALE_VERSION",
          select(2, fs:writeBytes(T("wb/none.bin"), "\5", { kind = "replaceIfVersion", version = v2 })).code)
        assert.are.equal(false, fs:stat(T("wb/none.bin")))
        assert.are.equal("FS_NOT_REGULAR_FILE", select(2, fs:writeBytes(T("wb"), "\6")).code)
        local out, code = P.sh("ls -A wb", { cwd = dir })
        assert.are.equal(0, code); assert.is_nil(out:find(".moonbox-", 1, true), out)
      end)
    end)
    it("raises at the caller's line for content that is not a string or a bad guard", function()
      P.run(function()
        local t = T("wb/raise.bin")
        local ok, e = pcall(fs.writeBytes, fs, t, 42)
        assert.is_false(ok); assert.truthy(tostring(e):find("writeBytes: content must be a string", 1, true), e)
        ok, e = pcall(function() fs:writeBytes(t, "x", { kind = "createIfAbsent", versoin = "v" }) end)
        assert.is_false(ok)
        assert.truthy(tostring(e):find("writeBytes: expected: unknown field versoin", 1, true), e)
        assert.truthy(tostring(e):find("fs_contract_spec.lua:", 1, true), e)
        ok, e = pcall(function() fs:writeBytes("wb/raise.bin", "x") end)
        assert.is_false(ok); assert.truthy(tostring(e):find("fs:writeBytes: expected a target", 1, true), e)
        assert.are.equal(false, fs:stat(t))
      end)
    end)
  end)

  describe("remove", function()
    it("removes a file, then reports FS_NOT_FOUND", function()
      P.run(function()
        local t = T("rm-file.txt")
        assert(fs:writeText(t, "x"))
        assert.are.same({ type = "file" }, assert(fs:remove(t)))
        assert.are.equal(false, fs:stat(t))
        local r, err = fs:remove(t)
        assert.is_nil(r); assert.are.equal("FS_NOT_FOUND", err.code)
        assert.truthy(err.message:find(t.displayPath, 1, true), err.message)
      end)
    end)
    it("refuses a non-empty directory without recursive and removes it with", function()
      P.run(function()
        assert.are.equal(0, select(2, P.sh("mkdir -p rmd/a/b rmd/empty && printf x > rmd/a/b/f && ln -s ../../rmd-keep rmd/a/l"
          .. " && mkdir -p rmd-keep && printf k > rmd-keep/k", { cwd = dir })))
        local _, err = fs:remove(T("rmd"))
        assert.are.equal("FS_NOT_EMPTY", err and err.code)
        assert.are.equal("x", fs:readText(T("rmd/a/b/f")))
        assert.are.same({ type = "directory" }, assert(fs:remove(T("rmd/empty"))))
        assert.are.same({ type = "directory" }, assert(fs:remove(T("rmd"), { recursive = true })))
        assert.are.equal(false, fs:stat(T("rmd")))
        assert.are.equal("k", fs:readText(T("rmd-keep/k")))   -- the link inside was not followed
        assert.are.equal("FS_NOT_FOUND", select(2, fs:remove(T("rmd"), { recursive = true })).code)
      end)
    end)
    it("removes a symlink, not what it leads to", function()
      P.run(function()
        assert.are.equal(0, select(2, P.sh("mkdir -p rml-dir && printf k > rml-dir/k && ln -s rml-dir rml", { cwd = dir })))
        assert.are.same({ type = "symlink" }, assert(fs:remove(T("rml"), { recursive = true })))
        assert.are.equal(false, fs:lstat("rml", { cwd = dir }))
        assert.are.equal("k", fs:readText(T("rml-dir/k")))
      end)
    end)
    it("refuses the root", function()
      P.run(function()
        local _, err = fs:remove(T("/"))
        assert.are.equal("FS_INVALID_TARGET", err and err.code)
        assert.truthy(err.message:find("root", 1, true), err.message)
      end)
    end)
    it("reports FS_PERMISSION_DENIED where the world's user may not remove", function()
      if P.run(function() return P.sh("id -u") end) == "0\n" then
        return pending("the world's user is root: no permission is ever denied")
      end
      P.run(function()
        assert.are.equal(0, select(2, P.sh("mkdir -p rmp/in && printf x > rmp/f && chmod 555 rmp", { cwd = dir })))
        local _, e1 = fs:remove(T("rmp/f"))
        local _, e2 = fs:remove(T("rmp"), { recursive = true })
        P.sh("chmod 755 rmp", { cwd = dir })
        assert.are.equal("FS_PERMISSION_DENIED", e1 and e1.code)
        assert.are.equal("FS_PERMISSION_DENIED", e2 and e2.code)
        assert.are.equal("x", fs:readText(T("rmp/f")))
      end)
    end)
  end)

  describe("mkdir", function()
    it("makes a directory once, and with parents makes the missing ones and accepts an existing one", function()
      P.run(function()
        local t = T("mk/one")
        local _, err = fs:mkdir(t)
        assert.are.equal("FS_NOT_FOUND", err and err.code)   -- no parent
        assert.truthy(err.message:find(t.displayPath, 1, true), err.message)
        assert.are.equal(false, fs:stat(T("mk")))
        local out = assert(fs:mkdir(t, { parents = true }))
        assert.is_true(out.created)
        local st = assert(fs:stat(t))
        assert.are.equal("directory", st.type); assert.are.equal(out.version, st.version)
        assert.are.equal("FS_ALREADY_EXISTS", select(2, fs:mkdir(t)).code)
        assert.is_false(assert(fs:mkdir(t, { parents = true })).created)
        assert.is_true(assert(fs:mkdir(T("mk/two"), { parents = false })).created)
        assert.are.equal("directory", assert(fs:stat(T("mk/two"))).type)
      end)
    end)
    it("refuses an existing file with or without parents", function()
      P.run(function()
        local f = T("mk-file")
        assert(fs:writeText(f, "x"))
        assert.are.equal("FS_ALREADY_EXISTS", select(2, fs:mkdir(f)).code)
        assert.are.equal("FS_ALREADY_EXISTS", select(2, fs:mkdir(f, { parents = true })).code)
        assert.are.equal("x", fs:readText(f))
      end)
    end)
  end)

  describe("rename", function()
    it("moves a file atomically (the same inode), replacing the destination unless noReplace", function()
      P.run(function()
        local a, b, c = T("mv-a"), T("mv-b"), T("mv-c")
        local va = assert(fs:writeText(a, "A")).version
        assert(fs:writeText(b, "B"))
        local _, err = fs:rename(a, b, { noReplace = true })
        assert.are.equal("FS_ALREADY_EXISTS", err and err.code)
        assert.truthy(err.message:find(a.displayPath, 1, true) and err.message:find(b.displayPath, 1, true), err.message)
        assert.are.equal("A", fs:readText(a)); assert.are.equal("B", fs:readText(b))
        local out = assert(fs:rename(a, b))
        assert.are.equal("file", out.type)
        assert.are.equal(out.version, assert(fs:stat(b)).version)
        assert.are.equal(va:match("^(e2b:%x+:%x+:)"), out.version:match("^(e2b:%x+:%x+:)"))   -- dev:ino kept
        assert.are.equal("A", fs:readText(b)); assert.are.equal(false, fs:stat(a))
        assert.are.equal("file", assert(fs:rename(b, c, { noReplace = true })).type)
        assert.are.equal("A", fs:readText(c)); assert.are.equal(false, fs:stat(b))
      end)
    end)
    it("reports a missing source or destination directory with FS_NOT_FOUND", function()
      P.run(function()
        local _, e1 = fs:rename(T("mv-none"), T("mv-x"))
        assert.are.equal("FS_NOT_FOUND", e1 and e1.code)
        assert.truthy(e1.message:find("source", 1, true), e1.message)
        assert(fs:writeText(T("mv-src"), "s"))
        local _, e2 = fs:rename(T("mv-src"), T("mv-nodir/x"))
        assert.are.equal("FS_NOT_FOUND", e2 and e2.code)
        assert.truthy(e2.message:find("destination", 1, true), e2.message)
        assert.are.equal("s", fs:readText(T("mv-src")))
      end)
    end)
    it("moves directories and symlinks, refusing a non-empty destination and a move into itself", function()
      P.run(function()
        assert.are.equal(0, select(2, P.sh("mkdir -p mvd/sub mvfull/in && printf x > mvd/sub/f && ln -s mvd mvl", { cwd = dir })))
        assert.are.equal("FS_NOT_EMPTY", select(2, fs:rename(T("mvd"), T("mvfull"))).code)
        assert.are.equal("FS_INVALID_TARGET", select(2, fs:rename(T("mvd"), T("mvd/sub/deeper"))).code)
        assert(fs:writeText(T("mvfile"), "f"))
        assert.are.equal("FS_NOT_DIRECTORY", select(2, fs:rename(T("mvd"), T("mvfile"))).code)
        assert.are.equal("FS_NOT_REGULAR_FILE", select(2, fs:rename(T("mvfile"), T("mvfull"))).code)
        assert.are.equal("directory", assert(fs:rename(T("mvd"), T("mvd2"), { noReplace = true })).type)
        assert.are.equal("x", fs:readText(T("mvd2/sub/f")))
        -- a symlink is moved as itself (it now dangles: it was relative to nothing that moved)
        assert.are.equal("symlink", assert(fs:rename(T("mvl"), T("mvl2"))).type)
        assert.are.equal("symlink", assert(fs:lstat("mvl2", { cwd = dir })).type)
        assert.are.equal(false, fs:lstat("mvl", { cwd = dir }))
      end)
    end)
    it("reports a move to another file system as FS_CROSS_DEVICE", function()
      local other = P.run(function()
        local out = P.sh("stat -c %d . /dev/shm 2>/dev/null", { cwd = dir })
        local here, there = out:match("^(%d+)\n(%d+)\n$")
        return here and here ~= there
      end)
      if not other then return pending("no other file system at /dev/shm here") end
      P.run(function()
        local t = T("xdev.txt")
        assert(fs:writeText(t, "x"))
        local _, err = fs:rename(t, T("/dev/shm/moonbox-xdev-" .. os.time()))
        assert.are.equal("FS_CROSS_DEVICE", err and err.code)
        assert.are.equal("x", fs:readText(t))
      end)
    end)
    -- Cancellation at every point of a rename: either FS_ABORTED with nothing moved or success
    -- with the move done, never "aborted" after the move.
    it("never reports a rename that happened as aborted", function()
      P.run(function()
        local mb = require "moonbox"
        local a, b = T("mvc-a"), T("mvc-b")
        assert(fs:writeText(a, "x"))
        local probe = mb.spawn(function() assert(fs:rename(a, b)) assert(fs:rename(b, a)) end)
        local n = 0
        while not probe:done() do mb.sleep(0); n = n + 1 end
        local seen = { ok = 0, aborted = 0 }
        for k = 0, n // 2 + 2 do
          local res = {}
          local w = mb.spawn(function() res.r, res.err = fs:rename(a, b) end)
          for _ = 1, k do if w:done() then break end mb.sleep(0) end
          w:cancel()
          assert(w:join(30000))
          if res.r then
            assert.are.equal(false, fs:stat(a)); seen.ok = seen.ok + 1
            assert(fs:rename(b, a))
          else
            assert.are.equal("FS_ABORTED", res.err.code, tostring(res.err))
            assert.are.equal(false, fs:stat(b), "aborted at " .. k .. " but moved"); seen.aborted = seen.aborted + 1
          end
        end
        assert.is_true(seen.ok > 0 and seen.aborted > 0, ("ok %d, aborted %d"):format(seen.ok, seen.aborted))
      end, 120000)
    end)
  end)

  describe("watch", function()
    local WAIT = 20000   -- generous: how long an expected event may take to come
    -- Reads events until one matches; → that event, the ones before it.
    local function expect(w, ty, name, what)
      local before = {}
      while true do
        local ev, err = w:next(WAIT)
        assert(ev, ("%s: waiting for %s %s: %s"):format(what or "watch", ty, name, tostring(err)))
        if ev.type == ty and ev.name == name then return ev, before end
        before[#before + 1] = ev
      end
    end
    local function watch_procs(key) return P.survivors("watch*" .. key) end

    it("reports create, write, chmod, rename and remove made through ctx.fs and a shell, in order", function()
      P.run(function()
        local d = T("watch-kinds")
        assert(fs:mkdir(d))
        local w = assert(fs:watch(d))
        assert.are.equal("MB_TIMEOUT", select(2, w:next(50)).code)   -- nothing happened yet
        assert(fs:writeText(T("watch-kinds/a.txt"), "one\n"))
        local ev = expect(w, "create", "a.txt")
        assert.are.equal(d.displayPath .. "/a.txt", ev.path)
        assert.are.equal(0, select(2, P.sh("echo two >> a.txt && chmod 600 a.txt", { cwd = dir .. "/watch-kinds" })))
        expect(w, "write", "a.txt"); expect(w, "chmod", "a.txt")
        assert(fs:rename(T("watch-kinds/a.txt"), T("watch-kinds/b.txt")))
        expect(w, "rename", "a.txt"); expect(w, "create", "b.txt")
        assert(fs:remove(T("watch-kinds/b.txt")))
        expect(w, "remove", "b.txt")
        assert.are.equal(0, select(2, P.sh("mkdir sub && touch c && mv c e && rm e", { cwd = dir .. "/watch-kinds" })))
        expect(w, "create", "sub"); expect(w, "create", "c"); expect(w, "rename", "c"); expect(w, "create", "e")
        ev = expect(w, "remove", "e")
        assert.are.equal(d.displayPath .. "/e", ev.path)
        w:close()
      end)
    end)

    it("watches subdirectories only when recursive, those made after the watch began included", function()
      P.run(function()
        local base = dir .. "/watch-rec"
        assert.are.equal(0, select(2, P.sh("mkdir -p '" .. base .. "/sub'")))
        local d = T("watch-rec")
        local flat = assert(fs:watch(d))
        local rec = assert(fs:watch(d, { recursive = true, maxEvents = 64 }))
        assert.are.equal(0, select(2, P.sh("echo x > sub/inner && mkdir -p later/deep && echo y > later/deep/f && echo z > top",
          { cwd = base })))
        local ev = expect(rec, "create", "sub/inner", "recursive")
        assert.are.equal(base .. "/sub/inner", ev.path)
        expect(rec, "create", "later/deep/f", "recursive")
        expect(rec, "create", "top", "recursive")
        -- the flat watch sees the same changes in the directory itself, nothing below it
        local _, before = expect(flat, "create", "top", "flat")
        local later = false
        for _, e in ipairs(before) do
          assert.is_nil(e.name:find("/", 1, true), "flat watch reported " .. e.name)
          if e.type == "create" and e.name == "later" then later = true end
        end
        assert.is_true(later)
        flat:close(); rec:close()
      end)
    end)

    it("signals dropped events in order when its queue overflows", function()
      P.run(function()
        local d = T("watch-over")
        assert(fs:mkdir(d))
        local w = assert(fs:watch(d, { maxEvents = 4 }))
        -- 301 creations (a directory each: one event), not read while they happen
        assert.are.equal(0, select(2, P.sh("for i in $(seq 1 300); do mkdir d$i; done; mkdir last",
          { cwd = dir .. "/watch-over" })))
        local events, dropped, overflows, first_overflow = 0, 0, 0, nil
        while events + dropped < 301 do
          local ev, err = w:next(WAIT)
          assert(ev, tostring(err))
          if ev.type == "overflow" then
            overflows = overflows + 1
            dropped = dropped + ev.dropped
            assert.is_true(ev.dropped >= 1)
            first_overflow = first_overflow or events
          else
            assert.are.equal("create", ev.type)
            events = events + 1
          end
        end
        assert.are.equal(301, events + dropped)
        assert.is_true(overflows >= 1, "no overflow signal")
        assert.are.equal(4, first_overflow)          -- after the queue's 4 events, before later ones
        assert.are.equal("MB_TIMEOUT", select(2, w:next(50)).code)
        w:close()
      end, 120000)
    end)

    it("close ends the watch process; next then returns MB_CLOSED", function()
      P.run(function()
        local d = T("watch-close")
        assert(fs:mkdir(d))
        local w = assert(fs:watch(d, { recursive = true }))
        assert.are.equal(1, #watch_procs(d.targetKey))
        assert.is_true(w:close())
        assert.are.same({}, watch_procs(d.targetKey))
        assert.are.equal("MB_CLOSED", select(2, w:next(10)).code)
        assert.is_true(w:close())                      -- idempotent
      end)
    end)

    it("ends with the service's disposal and when the task that started it is canceled", function()
      P.run(function()
        local m = require "moonbox"
        local d = T("watch-end")
        assert(fs:mkdir(d))
        -- a second service over the same world: its disposal leaves ours alone
        local fs2 = require("moonbox.fs.service").new(fs.world, fs.config, nil, nil)
        local w2 = assert(fs2:watch(d))
        assert.are.equal(1, #watch_procs(d.targetKey))
        assert(fs2:dispose())
        assert.are.same({}, watch_procs(d.targetKey))
        assert.are.equal("MB_CLOSED", select(2, w2:next(10)).code)
        -- a task blocked in next() is canceled: its watcher is closed
        local started, got = m.event(), nil
        local t = m.spawn(function()
          got = assert(fs:watch(d))
          started:set(true)
          return got:next()
        end)
        assert(started:wait(WAIT))
        assert.are.equal(1, #watch_procs(d.targetKey))
        t:cancel()
        t:join(WAIT)
        local gone = false
        for _ = 1, 200 do                              -- the close runs in a task of its own
          if #watch_procs(d.targetKey) == 0 then gone = true break end
          m.sleep(100)
        end
        assert.is_true(gone, "the watch process outlived its canceled task")
        assert.are.equal("MB_CLOSED", select(2, got:next(10)).code)
      end, 60000)
    end)

    it("ends with FS_NOT_FOUND when the watched directory goes", function()
      P.run(function()
        local d = T("watch-gone")
        assert(fs:mkdir(d))
        local w = assert(fs:watch(d))
        assert(fs:remove(d))
        local ev, err
        repeat ev, err = w:next(WAIT) until not ev
        assert.are.equal("FS_NOT_FOUND", err.code)
        assert.are.equal("FS_NOT_FOUND", select(2, w:next(10)).code)   -- it stays
        assert.are.same({}, watch_procs(d.targetKey))
        w:close()
      end)
    end)

    it("refuses a missing directory, a file and bad options", function()
      P.run(function()
        assert.are.equal("FS_NOT_FOUND", select(2, fs:watch(T("watch-missing"))).code)
        assert(fs:writeText(T("watch-file"), "x"))
        local _, err = fs:watch(T("watch-file"))
        assert.are.equal("FS_NOT_DIRECTORY", err.code)
        assert.truthy(err.message:find("watch-file", 1, true), err.message)
        local d = T(".")
        local cases = {
          { function() fs:watch(d, { recursiv = true }) end,
            "fs:watch: opts: unknown field recursiv (expected recursive, maxEvents; the nearest is recursive)" },
          { function() fs:watch(d, { maxevent = 3 }) end, "the nearest is maxEvents" },
          { function() fs:watch(d, { recursive = 1 }) end, "fs:watch: opts: recursive must be a boolean, got number" },
          { function() fs:watch(d, { maxEvents = 0 }) end, "fs:watch: opts: maxEvents must be a whole number from 1 to" },
          { function() fs:watch(d, { maxEvents = 2.5 }) end, "fs:watch: opts: maxEvents must be a whole number" },
          { function() fs:watch("/tmp") end, "fs:watch: expected a target from fs:resolve(path), got string" },
        }
        for _, c in ipairs(cases) do
          local ok, e = pcall(c[1])
          assert.is_false(ok)
          e = tostring(e)
          assert.truthy(e:find(c[2], 1, true), e)
          assert.truthy(e:find("fs_contract_spec.lua:", 1, true), "at the caller's line: " .. e)
        end
        assert.are.same({}, watch_procs(dir))
      end)
    end)
  end)

  it("refuses unknown option fields, naming them and the nearest valid one", function()
    P.run(function()
      local function raised(fn)
        local ok, err = pcall(fn)
        assert.is_false(ok)
        return tostring(err)
      end
      local t = T("strict.txt")
      local e1 = raised(function() fs:resolve("x", { cwd = dir, cdw = dir }) end)
      assert.truthy(e1:find("fs:resolve: opts: unknown field cdw (expected cwd; the nearest is cwd)", 1, true), e1)
      local e2 = raised(function() fs:lstat("x", { follow = true }) end)
      assert.truthy(e2:find("fs:lstat: opts: unknown field follow (expected cwd)", 1, true), e2)
      local e3 = raised(function() fs:writeText(t, "x", { kind = "replaceIfVersion", version = "v", verison = "v" }) end)
      assert.truthy(e3:find("writeText: expected: unknown field verison", 1, true) and e3:find("the nearest is version", 1, true), e3)
      local e4 = raised(function() fs:editText(t, { oldString = "a", newstring = "b" }) end)
      assert.truthy(e4:find("editText: edit: unknown field newstring", 1, true) and e4:find("the nearest is newString", 1, true), e4)
      assert.truthy(e4:find("fs_contract_spec.lua:", 1, true), "at the caller's line: " .. e4)
      -- remove, mkdir, rename: each option table is strict, and a wrong type names the field
      local cases = {
        { function() fs:remove(t, { recursve = true }) end,
          "fs:remove: opts: unknown field recursve (expected recursive; the nearest is recursive)" },
        { function() fs:remove(t, { recursive = "yes" }) end, "fs:remove: opts: recursive must be a boolean, got string" },
        { function() fs:remove(t, true) end, "fs:remove: opts must be a table or nil, got boolean" },
        { function() fs:mkdir(t, { parent = true }) end,
          "fs:mkdir: opts: unknown field parent (expected parents; the nearest is parents)" },
        { function() fs:mkdir(t, { parents = 1 }) end, "fs:mkdir: opts: parents must be a boolean, got number" },
        { function() fs:rename(t, t, { noreplace = true }) end,
          "fs:rename: opts: unknown field noreplace (expected noReplace; the nearest is noReplace)" },
        { function() fs:rename(t, t, { noReplace = "no" }) end, "fs:rename: opts: noReplace must be a boolean, got string" },
        { function() fs:rename(t, "strict2.txt") end, "fs:rename (to): expected a target from fs:resolve(path), got string" },
        { function() fs:writeText(t, "x", "createIfAbsent") end, "writeText: expected must be a table or nil, got string" },
      }
      for _, c in ipairs(cases) do
        local e = raised(c[1])
        assert.truthy(e:find(c[2], 1, true), e)
        assert.truthy(e:find("fs_contract_spec.lua:", 1, true), "at the caller's line: " .. e)
      end
      assert.are.equal(false, fs:stat(t))   -- nothing was done
    end)
  end)

  describe("request budget", function()
    it("resolve 1, guarded write at most 3, read at most 2, guarded edit at most 3", function()
      if P.open().name ~= "e2b" then return pending("requests are the E2B providers' cost") end
      P.run(function()
        local n, t = P.requests(function() return T("budget.txt") end)
        assert.are.equal(1, n)
        local w = P.requests(function() assert(fs:writeText(t, "x", { kind = "createIfAbsent" })) end)
        assert.is_true(w <= 3, "guarded write took " .. w)
        local v = assert(fs:stat(t)).version
        w = P.requests(function() assert(fs:writeText(t, "y", { kind = "replaceIfVersion", version = v })) end)
        assert.is_true(w <= 3, "guarded write took " .. w)
        local r = P.requests(function() assert(fs:readText(t)) end)
        assert.is_true(r <= 2, "read took " .. r)
        v = assert(fs:stat(t)).version
        local e = P.requests(function() assert(fs:editText(t, { oldString = "y", newString = "z" }, { version = v })) end)
        assert.is_true(e <= 3, "guarded edit took " .. e)
        assert.are.equal("z", fs:readText(t))
      end)
    end)
    it("writeBytes 2, a refused writeText 0, remove, mkdir and rename 1 each", function()
      if P.open().name ~= "e2b" then return pending("requests are the E2B providers' cost") end
      P.run(function()
        local t = T("budget2.bin")
        assert.are.equal(2, (P.requests(function() assert(fs:writeBytes(t, "\0\1\2")) end)))
        assert.are.equal(0, (P.requests(function() assert(not fs:writeText(t, "\0")) end)))
        local d, d2 = T("budget-dir"), T("budget-dir2")
        assert.are.equal(1, (P.requests(function() assert(fs:mkdir(d)) end)))
        assert.are.equal(1, (P.requests(function() assert(fs:rename(d, d2)) end)))
        assert.are.equal(1, (P.requests(function() assert(fs:remove(d2)) end)))
        assert.are.equal(1, (P.requests(function() assert(not fs:remove(d2)) end)))   -- FS_NOT_FOUND costs 1 too
      end)
    end)
  end)
end)
