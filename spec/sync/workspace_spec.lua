-- Workspace sync (ctx.workspace) on either provider family (MOONBOX_SEAM_PROVIDER: the E2B
-- providers on sandboxd, or the host providers — a local copy with the same semantics): round
-- trips, excludes and .gitignore rules, request budgets, conflicts, every hostile entry, limits,
-- interruption, and a task collecting garbage all along.
local P = require "seam.provider"
local errors = require "moonbox.errors"

local s_, ctx

-- Host shell (the host side of a sync, whatever the family). → stdout, exit code
local function hsh(cmd)
  local p = assert(io.popen("(" .. cmd .. ") 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end
local function hok(cmd)
  local out, code = hsh(cmd)
  assert(code == 0, cmd .. ": " .. out)
  return out
end
local function wok(script)
  local out, code, err = P.sh(script)
  assert(code == 0, script .. ": " .. out .. err)
  return out
end
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The same listing on both sides: type, mode, size of files, mtime (files and directories),
-- link targets; names with a newline are left to their own checks.
local LIST = [[cd %s && find . -mindepth 1 ! -name '*
*' -printf '%%y %%m %%s %%T@ %%p -> %%l\n' | sed -E 's/^(d [0-7]+) [0-9]+/\1 -/; s/^(l [0-7]+ [0-9]+) [0-9.]+/\1 -/' | LC_ALL=C sort]]

-- no_dir_times: a pull writes into directories (their times are the host's own)
local function listing(dir, no_dir_times)
  local l = LIST:format(q(dir))
  if no_dir_times then l = l .. [[ | sed -E 's/^(d [0-7]+ -) [0-9.]+/\1 -/']] end
  return l .. " | LC_ALL=C sort"
end
local function host_list(dir, nd) return hok(listing(dir, nd)) end
local function world_list(dir, nd) return wok(listing(dir, nd)) end

-- A host tree with what a push must keep: modes, links in and out of the tree, empty
-- directories, mtimes, odd names.
local function make_tree(dir)
  hok(([[cd %s && mkdir -p a/b empty deep/er/est && printf hello > a/x.txt && chmod 750 a/x.txt &&
    printf tool > a/run.sh && chmod 755 a/run.sh && chmod 700 a/b && printf dot > .hidden &&
    printf sp > 'sp ace.txt' && printf u > 'ünï cödé.txt' && printf nl > "$(printf 'new\nline')" &&
    ln -s ../a/x.txt deep/rel && ln -s /etc/passwd abs && ln -s missing dangling &&
    printf 'x%%.0s' $(seq 1 70000) > big.bin && touch -d '2001-02-03 04:05:06.123456789' a/x.txt empty]]):format(q(dir)))
end

local function expect_err(code, r, err)
  assert.is_nil(r)
  assert(errors.is(err), tostring(err))
  assert.are.equal(code, err.code, tostring(err))
  return err
end

describe("workspace sync (" .. (os.getenv("MOONBOX_SEAM_PROVIDER") or "e2b") .. " providers)", function()
  setup(function()
    s_ = P.open()
    ctx = s_.ctx
  end)

  it("pushes a tree as it is (modes, links, empty directories, mtimes, odd names) in at most 3 requests", function()
    P.run(function()
      local host, world = P.host_dir("push"), P.scratch("push")
      make_tree(host)
      local n, r, err = P.requests(function() return ctx.workspace:push{ from = host, to = world } end)
      assert(r, tostring(err))
      assert.is_true(n <= 3, "requests: " .. n)
      assert.are.equal(7, r.files)
      assert.are.equal(3, r.symlinks)
      assert.are.equal(host_list(host), world_list(world))
      assert.are.equal("nl", wok(("cat %s/\"$(printf 'new\\nline')\""):format(q(world))))
      -- a link out of the tree is a link, not what it points to
      assert.are.equal("/etc/passwd\n", wok(("readlink %s/abs"):format(q(world))))
      assert.are.equal(r.bytes, 5 + 4 + 3 + 2 + 1 + 2 + 70000)
    end, 120000)
  end)

  it("replaces the target as a whole, following excludes and .gitignore rules", function()
    P.run(function()
      local host, world = P.host_dir("repl"), P.scratch("repl")
      hok(("cd %s && mkdir -p build src node_modules/m && printf 1 > src/a.c && printf 2 > build/a.o && printf 3 > x.log && "
        .. "printf 4 > keep.log && printf 5 > node_modules/m/i.js && printf 'build/\\n*.log\\n!keep.log\\n' > .gitignore"):format(q(host)))
      assert(ctx.workspace:push{ from = host, to = world })
      wok(("printf stale > %s/stale.txt"):format(q(world)))
      local r = assert(ctx.workspace:push{ from = host, to = world, gitignore = true, exclude = { "node_modules/" } })
      assert.are.equal(3, r.excluded)
      local got = wok(("cd %s && find . -mindepth 1 | LC_ALL=C sort"):format(q(world)))
      assert.are.equal("./.gitignore\n./keep.log\n./src\n./src/a.c\n", got)
      -- a pull follows the push's rules: what is excluded in the world is left alone
      wok(("cd %s && mkdir build && printf o > build/new.o && printf l > new.log && printf c > src/b.c"):format(q(world)))
      local p = assert(ctx.workspace:pull{ from = world, to = host })
      assert.are.same({ "src/b.c" }, p.added)
      assert.are.same({}, p.deleted)
      assert.are.equal("2", hok(("cat %s/build/a.o"):format(q(host))))
    end, 120000)
  end)

  it("pulls back only what changed, in at most 3 requests; diff says the same and writes nothing", function()
    P.run(function()
      local host, world = P.host_dir("pull"), P.scratch("pull")
      make_tree(host)
      hok(("cd %s && for i in $(seq 1 40); do printf f$i > f$i.txt; done"):format(q(host)))
      assert(ctx.workspace:push{ from = host, to = world })
      local inode = hok(("stat -c %%i %s/a/x.txt"):format(q(host)))
      wok(([[cd %s && printf changed > a/x.txt && printf new > a/new.txt && mkdir -p n/m && printf deep > n/m/d.txt &&
        rm f1.txt && chmod 600 f2.txt && rm deep/rel && ln -s ../f3.txt deep/rel && rmdir empty &&
        for i in 4 5 6 7; do printf again$i > f$i.txt; done]]):format(q(world)))
      local before = host_list(host)
      local dn, d = P.requests(function() return assert(ctx.workspace:diff{ from = world, to = host }) end)
      assert.is_true(dn <= 1, "diff requests: " .. dn)
      assert.are.same({ "a/new.txt", "n", "n/m", "n/m/d.txt" }, d.added)
      assert.are.same({ "a/x.txt", "deep/rel", "f4.txt", "f5.txt", "f6.txt", "f7.txt" }, d.modified)
      assert.are.same({ "empty", "f1.txt" }, d.deleted)
      assert.are.same({ "f2.txt" }, d.modeChanged)
      assert.are.same({}, d.conflicts)
      assert.are.equal(before, host_list(host))                     -- diff wrote nothing
      local pn, p = P.requests(function() return assert(ctx.workspace:pull{ from = world, to = host }) end)
      assert.is_true(pn <= 3, "pull requests: " .. pn)
      assert.are.same(d.added, p.added)
      assert.are.same(d.modified, p.modified)
      assert.are.same(d.deleted, p.deleted)
      assert.are.same(d.modeChanged, p.modeChanged)
      local wl, hl = world_list(world, true), host_list(host, true)
      if wl ~= hl then
        local a, b = io.open("/tmp/mb-wl", "w"), io.open("/tmp/mb-hl", "w")
        a:write(wl) a:close() b:write(hl) b:close()
        print(hsh("diff /tmp/mb-wl /tmp/mb-hl"))
      end
      assert.are.equal(wl, hl)
      assert.are_not.equal(inode, hok(("stat -c %%i %s/a/x.txt"):format(q(host)))) -- replaced by a rename
      assert.are.equal("changed", hok(("cat %s/a/x.txt"):format(q(host))))
      -- nothing left behind, and nothing more to pull
      assert.are.equal("", hok(("ls -a %s | grep moonbox-sync || true"):format(q(host))))
      local again = assert(ctx.workspace:diff{ from = world, to = host })
      assert.are.same({ {}, {}, {}, {} }, { again.added, again.modified, again.deleted, again.modeChanged })
    end, 120000)
  end)

  it("reports a host change since the push as a conflict, and overwrites only when prefer says so", function()
    P.run(function()
      local host, world = P.host_dir("conf"), P.scratch("conf")
      hok(("cd %s && printf base > c.txt && printf base > same.txt && printf base > gone.txt && printf base > ok.txt"):format(q(host)))
      assert(ctx.workspace:push{ from = host, to = world })
      hok(("cd %s && printf host > c.txt && printf both > same.txt && rm gone.txt && printf hostnew > added.txt"):format(q(host)))
      wok(("cd %s && printf world > c.txt && printf both > same.txt && printf world > gone.txt && printf w > ok.txt && printf worldnew > added.txt"):format(q(world)))
      local d = assert(ctx.workspace:diff{ from = world, to = host })
      local paths = {}
      for _, c in ipairs(d.conflicts) do paths[#paths + 1] = c.path .. ":" .. c.change end
      assert.are.same({ "added.txt:added", "c.txt:modified", "gone.txt:modified" }, paths)
      assert.are.same({ "ok.txt" }, d.modified)
      local p = assert(ctx.workspace:pull{ from = world, to = host })
      assert.are.equal(3, #p.conflicts)
      assert.is_nil(p.conflicts[1].resolution)
      assert.truthy(p.conflicts[2].reason:find("changed on the host", 1, true))
      assert.are.equal(1, p.same)
      assert.are.equal("host", hok(("cat %s/c.txt"):format(q(host))))   -- not overwritten
      assert.are.equal("w", hok(("cat %s/ok.txt"):format(q(host))))
      assert.are.equal("hostnew", hok(("cat %s/added.txt"):format(q(host))))
      local k = assert(ctx.workspace:pull{ from = world, to = host, prefer = "host" })
      assert.are.equal("host", k.conflicts[1].resolution)
      assert.are.equal("host", hok(("cat %s/c.txt"):format(q(host))))
      local w = assert(ctx.workspace:pull{ from = world, to = host, prefer = "sandbox" })
      assert.are.equal("sandbox", w.conflicts[1].resolution)
      assert.are.equal("world", hok(("cat %s/c.txt"):format(q(host))))
      assert.are.equal("world", hok(("cat %s/gone.txt"):format(q(host))))
      assert.are.equal("worldnew", hok(("cat %s/added.txt"):format(q(host))))
      assert.are.same({}, assert(ctx.workspace:diff{ from = world, to = host }).conflicts)
    end, 120000)
  end)

  it("never writes through a host parent that became a symbolic link, whatever prefer says", function()
    P.run(function()
      local host, world, outside = P.host_dir("lnk"), P.scratch("lnk"), P.host_dir("outside")
      hok(("cd %s && mkdir d && printf base > d/f"):format(q(host)))
      assert(ctx.workspace:push{ from = host, to = world })
      hok(("cd %s && mv d d.real && ln -s %s d"):format(q(host), q(outside)))
      wok(("printf world > %s/d/f"):format(q(world)))
      local p = assert(ctx.workspace:pull{ from = world, to = host, prefer = "sandbox" })
      assert.are.equal(1, #p.conflicts)
      assert.are.equal("d/f", p.conflicts[1].path)
      assert.truthy(p.conflicts[1].reason:find("symbolic link", 1, true), p.conflicts[1].reason)
      assert.are.equal("", hok(("ls -A %s"):format(q(outside))))
    end, 120000)
  end)

  it("refuses hostile entries from the world by name, writing nothing", function()
    P.run(function()
      local host, world = P.host_dir("hostile"), P.scratch("hostile")
      hok(("cd %s && printf base > a.txt && mkdir d && printf base > d/f"):format(q(host)))
      assert(ctx.workspace:push{ from = host, to = world })
      -- a FIFO made in the world
      wok(("mkfifo %s/pipe"):format(q(world)))
      local err = expect_err("SYNC_UNSUPPORTED_TYPE", ctx.workspace:pull{ from = world, to = host })
      assert.are.equal("pipe", err.path)
      assert.truthy(tostring(err):find("FIFO", 1, true))
      wok(("rm %s/pipe && printf changed > %s/a.txt && printf changed > %s/d/f"):format(q(world), q(world), q(world)))
      -- a world whose tar answers with crafted archives (a workspace of its own, same records)
      local crafted = P.host_dir("craft")
      local py = [[
import sys, tarfile, io
kind, out = sys.argv[1], sys.argv[2]
t = tarfile.open(out, "w", format=tarfile.PAX_FORMAT)
def add(name, type=tarfile.REGTYPE, data=b"evil", link=""):
    i = tarfile.TarInfo(name); i.type = type; i.linkname = link
    i.size = len(data) if type == tarfile.REGTYPE else 0
    t.addfile(i, io.BytesIO(data) if type == tarfile.REGTYPE else None)
add("a.txt", data=b"changed")
if kind == "dotdot": add("../evil")
if kind == "abs": add("/tmp/moonbox-evil")
if kind == "hard": add("d/f", tarfile.LNKTYPE, link="/etc/passwd")
if kind == "dev": add("d/f", tarfile.CHRTYPE)
if kind == "fifo": add("d/f", tarfile.FIFOTYPE)
if kind == "extra": add("d/f", data=b"changed"); add("sneaky")
if kind == "twice": add("d/f", data=b"changed"); add("a.txt", data=b"again")
if kind == "link": add("d/f", tarfile.SYMTYPE, link="/etc/passwd")
t.close()
]]
      local f = assert(io.open(crafted .. "/mk.py", "w"))
      f:write(py)
      f:close()
      local tarfile = P.scratch("faketar")
      local cfg = {}
      for k, v in pairs(require("moonbox.workspace").schema) do
        cfg[k] = type(v.default) == "function" and v.default() or v.default
      end
      cfg.stateDir = ctx.workspace.config.stateDir
      local want = {
        dotdot = { "SYNC_UNSAFE_ENTRY", "'..'" }, abs = { "SYNC_UNSAFE_ENTRY", "absolute" },
        hard = { "SYNC_UNSAFE_ENTRY", "hard link" }, dev = { "SYNC_UNSAFE_ENTRY", "device" },
        fifo = { "SYNC_UNSAFE_ENTRY", "FIFO" }, extra = { "SYNC_UNSAFE_ENTRY", "not asked for" },
        twice = { "SYNC_UNSAFE_ENTRY", "twice" }, link = { "SYNC_CHANGED", "changed in the world" },
      }
      local before = host_list(host)
      for kind, w in pairs(want) do
        hok(("python3 %s/mk.py %s %s/%s.tar"):format(q(crafted), kind, q(crafted), kind))
        local bytes = assert(io.open(("%s/%s.tar"):format(crafted, kind), "rb")):read("a")
        local t = assert(ctx.fs:resolve(("%s/%s.tar"):format(tarfile, kind)))
        wok(("mkdir -p %s"):format(q(tarfile)))
        assert(ctx.fs:writeBytes(t, bytes))
        wok(("printf '#!/bin/sh\\ncat %s/%s.tar\\n' > %s/tar && chmod 755 %s/tar"):format(tarfile, kind, q(tarfile), q(tarfile)))
        cfg.tar = tarfile .. "/tar"
        local ws = require("moonbox.workspace").new(ctx, cfg)
        local e = expect_err(w[1], ws:pull{ from = world, to = host })
        assert.truthy(e.message:find(w[2], 1, true), kind .. ": " .. e.message)
        assert.truthy(e.path and #e.path > 0, kind)
        assert.are.equal(before, host_list(host), kind)                -- nothing written
        assert.are.equal("", hok(("ls -a %s | grep moonbox-sync || true"):format(q(host))), kind)
      end
      assert.are.equal("", hsh("ls /tmp/moonbox-evil 2>/dev/null"))
    end, 180000)
  end)

  it("refuses device files, FIFOs and sockets on the host by name, and keeps links as links", function()
    P.run(function()
      local host, world = P.host_dir("hdev"), P.scratch("hdev")
      hok(("cd %s && printf x > f && mkfifo fifo"):format(q(host)))
      local err = expect_err("SYNC_UNSUPPORTED_TYPE", ctx.workspace:push{ from = host, to = world })
      assert.are.equal("fifo", err.path)
      assert.truthy(tostring(err):find("FIFO", 1, true))
      hok(("rm %s/fifo"):format(q(host)))
      if hsh("id -u") == "0\n" then
        hok(("mknod %s/dev c 1 3"):format(q(host)))
        local derr = expect_err("SYNC_UNSUPPORTED_TYPE", ctx.workspace:push{ from = host, to = world })
        assert.are.equal("dev", derr.path)
        assert.truthy(tostring(derr):find("device", 1, true))
        hok(("rm %s/dev"):format(q(host)))
      end
      -- the world target is untouched by refused pushes
      assert.are.equal("", wok(("ls -A %s 2>/dev/null || true"):format(q(world))))
      assert(ctx.workspace:push{ from = host, to = world, exclude = { "fifo" } })
    end, 120000)
  end)

  it("applies the caller's limits on entries and bytes, naming the field", function()
    P.run(function()
      local host, world = P.host_dir("lim"), P.scratch("lim")
      hok(("cd %s && for i in 1 2 3 4 5; do printf 0123456789 > f$i; done"):format(q(host)))
      local e1 = expect_err("SYNC_TOO_MANY_FILES", ctx.workspace:push{ from = host, to = world, maxFiles = 3 })
      assert.truthy(e1.message:find("maxFiles", 1, true))
      local e2 = expect_err("SYNC_TOO_LARGE", ctx.workspace:push{ from = host, to = world, maxBytes = 25 })
      assert.truthy(e2.message:find("maxBytes", 1, true))
      assert(ctx.workspace:push{ from = host, to = world })
      wok(("cd %s && head -c 100000 /dev/zero > f1 && for i in 6 7 8; do printf x > n$i; done"):format(q(world)))
      local e3 = expect_err("SYNC_TOO_LARGE", ctx.workspace:pull{ from = world, to = host, maxBytes = 50000 })
      assert.truthy(e3.message:find("maxBytes", 1, true))
      local e4 = expect_err("SYNC_TOO_MANY_FILES", ctx.workspace:pull{ from = world, to = host, maxFiles = 6 })
      assert.truthy(e4.message:find("maxFiles", 1, true))
      assert.are.equal("0123456789", hok(("cat %s/f1"):format(q(host))))
    end, 120000)
  end)

  it("leaves the previous state in place when a push or a pull is canceled mid-transfer", function()
    P.run(function()
      local m = require "moonbox"
      local host, world = P.host_dir("intr"), P.scratch("intr")
      hok(("cd %s && printf old > marker && head -c 4000000 /dev/urandom > r0"):format(q(host)))
      assert(ctx.workspace:push{ from = host, to = world })
      hok(("cd %s && printf new > marker && for i in $(seq 1 12); do head -c 2000000 /dev/urandom > r$i; done"):format(q(host)))
      local seen, t
      t = m.spawn(function()
        return ctx.workspace:push{ from = host, to = world, onProgress = function(p)
          if p.phase == "upload" and p.bytes > 0 and not seen then seen = p.bytes t:cancel() end
        end }
      end)
      local ok, r, err = t:join(60000)
      assert.is_true(ok)
      expect_err("SYNC_ABORTED", r, err)
      assert.truthy(seen and seen < 26000000, "canceled mid-transfer: " .. tostring(seen))
      assert.are.equal("old", wok(("cat %s/marker"):format(q(world))))
      assert.are.equal("marker\nr0\n", wok(("ls %s"):format(q(world))))
      local parent = world:match("^(.*)/[^/]+$")
      assert.are.equal("", wok(("ls -a %s | grep moonbox-sync || true"):format(q(parent))))
      -- a pull canceled while it fetches: the host is as it was
      hok(("cd %s && printf old > marker && rm -f r[1-9]*"):format(q(host)))
      wok(("cd %s && printf world > marker && head -c 20000000 /dev/urandom > r0"):format(q(world)))
      local sum = hok(("sha256sum %s/r0"):format(q(host)))
      local fetched, t2
      t2 = m.spawn(function()
        return ctx.workspace:pull{ from = world, to = host, onProgress = function(p)
          if p.phase == "fetch" and p.bytes > 0 and not fetched then fetched = p.bytes t2:cancel() end
        end }
      end)
      local ok2, r2, err2 = t2:join(60000)
      assert.is_true(ok2)
      expect_err("SYNC_ABORTED", r2, err2)
      assert.truthy(fetched and fetched < 20000000)
      assert.are.equal(sum, hok(("sha256sum %s/r0"):format(q(host))))
      assert.are.equal("old", hok(("cat %s/marker"):format(q(host))))
      assert.are.equal("", hok(("ls -a %s | grep moonbox-sync || true"):format(q(host))))
      -- and the next pull brings it all
      local p = assert(ctx.workspace:pull{ from = world, to = host })
      assert.are.same({ "marker", "r0" }, p.modified)
    end, 180000)
  end)

  it("reports a pull's fetch in bytes against a total", function()
    P.run(function()
      local host, world = P.host_dir("pullprog"), P.scratch("pullprog")
      assert(ctx.workspace:push{ from = host, to = world })          -- a pull needs a base
      wok(("cd %s && head -c 300000 /dev/urandom > a && head -c 513 /dev/urandom > b && : > c"):format(q(world)))
      local events = {}
      assert(ctx.workspace:pull{ from = world, to = host, onProgress = function(e)
        if e.phase == "fetch" then events[#events + 1] = e end
      end })
      assert.is_true(#events > 0)
      local last = 0
      for _, e in ipairs(events) do
        -- headers and 512-byte blocks: 3 entries, 300000 → 300032, 513 → 1024, 0 → 0, and the end
        assert.are.equal(1024 + 3 * 512 + 300032 + 1024, e.totalBytes)
        assert.is_true(e.bytes >= last and e.bytes <= e.totalBytes, ("%d of %d"):format(e.bytes, e.totalBytes))
        last = e.bytes
      end
      assert.is_true(last > 300000)
    end)
  end)

  it("survives a task collecting garbage all along (nothing C holds is collected)", function()
    P.run_gc(function()
      local host, world = P.host_dir("gc"), P.scratch("gc")
      hok(("cd %s && for i in $(seq 1 30); do head -c 20000 /dev/urandom > g$i; done"):format(q(host)))
      for i = 1, 3 do
        assert(ctx.workspace:push{ from = host, to = world })
        wok(("cd %s && printf z%d > g1 && printf n > new"):format(q(world), i))
        local p = assert(ctx.workspace:pull{ from = world, to = host })
        assert.are.equal(1, #p.modified)
        hok(("rm %s/new"):format(q(host)))
      end
    end, 120000)
  end)

  it("raises for bad arguments", function()
    P.run(function()
      assert.has_error(function() ctx.workspace:push("x") end)
      assert.has_error(function() ctx.workspace:push{ from = "", to = "/x" } end)
      assert.has_error(function() ctx.workspace:pull{ from = "/a", to = "/b", prefer = "both" } end)
      assert.has_error(function() ctx.workspace:push{ from = "/a", to = "/b", exclude = "*.o" } end)
      assert.has_error(function() ctx.workspace:push{ from = "/a", to = "/b", maxFiles = 0 } end)
      assert.has_error(function() ctx.workspace:push{ from = "/a", to = "/" } end)
      assert.has_error(function() ctx.workspace:push{ from = "/a", to = "/b", excludes = { "*.o" } } end,
        "workspace:push: unknown field excludes (expected from, to, exclude, gitignore, maxFiles, maxBytes, maxMetaBytes, "
          .. "prefer, onProgress; the nearest is exclude)")
      local r, err = ctx.workspace:pull{ from = P.scratch("never"), to = P.host_dir("never") }
      expect_err("SYNC_NO_BASE", r, err)
      expect_err("SYNC_NOT_FOUND", ctx.workspace:push{ from = "/nonexistent-moonbox", to = P.scratch("x") })
    end)
  end)
end)
