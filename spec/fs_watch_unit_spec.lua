-- moonbox.fs.watch without a world: mbwrap watch's records and the bounded queue.
local watch = require "moonbox.fs.watch"

describe("fs watch records", function()
  local parse = watch.parse_record
  it("parses each record kind and names with any byte", function()
    local buf = "ready\nev create 3 a\nb\nev chmod 5 d/\xC3\xA9f\noverflow\nerr ENOENT cannot watch '/x': gone\ngone\n"
    local pos, got = 1, {}
    while pos <= #buf do
      local r, np = parse(buf, pos)
      assert.is_table(r)
      got[#got + 1] = r
      pos = np
    end
    assert.are.same({ { kind = "ready" }, { kind = "ev", type = "create", name = "a\nb" },
      { kind = "ev", type = "chmod", name = "d/\xC3\xA9f" }, { kind = "overflow" },
      { kind = "err", code = "ENOENT", detail = "cannot watch '/x': gone" }, { kind = "gone" } }, got)
  end)
  it("waits for the rest of a record cut anywhere", function()
    local rec = "ev write 7 sub/f\nx\n"
    for cut = 0, #rec - 1 do
      assert.is_nil(parse(rec:sub(1, cut), 1), "cut at " .. cut)
    end
    assert.are.same({ kind = "ev", type = "write", name = "sub/f\nx" }, (parse(rec, 1)))
  end)
  it("refuses malformed records", function()
    for _, bad in ipairs({ "nonsense\n", "ev move 1 a\n", "ev create 0 \n", "ev create 1 ab\n", "ready!\n", "ev create x a\n",
      "ev create 99999 a\n", "err\n", "12\n" }) do
      assert.are.equal(false, parse(bad, 1), bad)
    end
  end)
end)

describe("fs watch queue", function()
  local mb = require "moonbox"
  local function watcher(max, base)
    return watch.new{ fs = { watchers = {} }, target = { displayPath = base or "/w", targetKey = "/w" }, max = max,
      s = {}, timeouts = {} }
  end
  local function drain(w)
    local out = {}
    mb.run(function()
      while true do
        local ev, err = w:next(0)
        if not ev then assert.are.equal("MB_TIMEOUT", err.code) return end
        out[#out + 1] = ev
      end
    end)
    return out
  end
  it("drops what comes while full, counted by one overflow record in its place", function()
    local w = watcher(2)
    for _, n in ipairs({ "a", "b", "c", "d" }) do w:_event("create", n) end
    w:_kernel_overflow()
    local got = drain(w)
    assert.are.same({ { type = "create", name = "a", path = "/w/a" }, { type = "create", name = "b", path = "/w/b" },
      { type = "overflow", dropped = 2, kernel = true } }, got)
    -- room again: events after it, a new overflow record after them
    for _, n in ipairs({ "e", "f", "g" }) do w:_event("write", n) end
    got = drain(w)
    assert.are.same({ "e", "f", "overflow" }, { got[1].name, got[2].name, got[3].type })
    assert.are.equal(1, got[3].dropped)
    assert.is_nil(got[3].kernel)
  end)
  it("joins names to the root without a double slash", function()
    local w = watcher(4, "/")
    w:_event("remove", "x/y")
    assert.are.equal("/x/y", drain(w)[1].path)
  end)
  it("delivers a kernel overflow alone in order", function()
    local w = watcher(4)
    w:_event("create", "a"); w:_kernel_overflow(); w:_event("create", "b")
    local got = drain(w)
    assert.are.same({ "create", "overflow", "create" }, { got[1].type, got[2].type, got[3].type })
    assert.are.same({ 0, true }, { got[2].dropped, got[2].kernel })
  end)
end)
