-- The one list of error codes (core/error_codes.def) as Lua sees it: moonbox.core.error_codes,
-- errors.codes() and errors.known(). tests/error_codes.py checks the sources against it.
local errors = require "moonbox.errors"

describe("error codes", function()
  it("lists every code once, with its meaning and modules", function()
    local seen = {}
    for _, c in ipairs(errors.codes()) do
      assert.is_nil(seen[c.name], c.name)
      seen[c.name] = c
      assert.truthy(#c.meaning > 0 and #c.modules > 0, c.name)
    end
    for _, name in ipairs({ "E2B_NOMEM", "MB_CANCELED", "SYNC_CHANGED", "SYNC_CONFLICT", "MB_IO", "SPAWN_FAILED",
      "FS_NOT_FOUND", "E2B_DEADLINE_EXCEEDED", "POLICY_INVALID" }) do
      assert.is_table(seen[name], name)
    end
    assert.is_true(seen["TOOL_*"].family)
    assert.are.equal("TOOL_", seen["TOOL_*"].prefix)
    assert.are.same(require("moonbox.core").error_codes, errors.codes())
  end)

  it("knows the list's codes and its families' codes, nothing else", function()
    assert.is_true(errors.known("SYNC_UNSAFE_ENTRY"))
    assert.is_true(errors.known("TOOL_ENOENT"))
    assert.is_false(errors.known("TOOL_"))
    assert.is_false(errors.known("NOT_A_CODE"))
    assert.is_false(errors.known(nil))
    for _, c in ipairs(errors.FS) do assert.is_true(errors.known(c), c) end
  end)

  it("names a host process that cannot start SPAWN_FAILED, a host I/O failure MB_IO", function()
    local mb = require "moonbox"
    mb.run(function()
      local p, err = mb.proc.spawn{ argv = { "/nonexistent/binary" } }
      assert.is_nil(p)
      assert.are.equal("SPAWN_FAILED", err.code)
      assert.is_true(errors.known(err.code))
      local s, serr = mb.pstream.spawn({ argv = { "/nonexistent/binary" } }, { stdout = "discard", stderr = "discard" })
      assert.is_nil(s)
      assert.are.equal("SPAWN_FAILED", serr.code)
    end)
    local l, lerr = require("moonbox.core").lock_file("/tmp")   -- a directory: EISDIR
    assert.is_nil(l)
    assert.are.equal("MB_IO", lerr.code)
  end)
end)
