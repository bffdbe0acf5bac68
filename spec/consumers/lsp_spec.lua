-- The LSP consumer (ctx.lsp) on whichever provider family MOONBOX_SEAM_PROVIDER names, with
-- clangd (Debian's clangd package) as the server, under constant garbage collection; and its
-- framing alone.
local P = require "seam.provider"
local lsp = require "moonbox.consumers.lsp"

describe("lsp framing", function()
  it("splits messages across and within chunks", function()
    local f = lsp.framer(1000)
    local a, b = lsp.encode({ id = 1 }), lsp.encode({ id = 2, x = "é" })
    local got = {}
    for i = 1, #a + #b do
      local out = assert(f.push((a .. b):sub(i, i)))
      for _, m in ipairs(out) do got[#got + 1] = m end
    end
    local cjson = require "cjson"
    assert.are.equal(2, #got)
    assert.are.same({ id = 1 }, cjson.decode(got[1]))
    assert.are.same({ id = 2, x = "é" }, cjson.decode(got[2]))
    assert.are.same({ '{"id":1}', '{"id":1}' }, assert(f.push(a .. a)))
    assert.are.same({ "" }, assert(f.push("Content-Length: 0\r\nContent-Type: x\r\n\r\n")))
  end)

  it("refuses what is not LSP, with the reason", function()
    assert.are.same({ nil, "a message without Content-Length" }, { lsp.framer(10).push("X-Y: 1\r\n\r\n") })
    assert.are.same({ nil, "a 11-byte message exceeds maxMessageBytes (10)" },
      { lsp.framer(10).push("Content-Length: 11\r\n\r\n") })
    assert.are.same({ nil, "Content-Length must be a whole number" }, { lsp.framer(10).push("Content-Length: -1\r\n\r\n") })
    assert.are.same({ nil, 'a malformed header line "garbage"' }, { lsp.framer(10).push("garbage\r\n\r\n") })
    assert.are.same({ nil, "a header block longer than 8192 bytes" }, { lsp.framer(10).push(("x"):rep(9000)) })
  end)

  it("maps file URLs back to paths", function()
    assert.are.equal("/a b/c.c", lsp.uri_path("file:///a%20b/c.c"))
    assert.is_nil(lsp.uri_path("untitled:1"))
  end)
end)

local BROKEN = [[
#include <stdio.h>
static int twice(int x) { return 2 * x; }
int main(void) {
  printf("%d\n", twice(21))
  return 0;
}
]]

describe("lsp consumer #sandboxd", function()
  local ctx, mb, dir
  setup(function()
    ctx = P.open().ctx
    mb = require "moonbox"
  end)
  teardown(function() P.close() end)

  -- A workspace with one C file; nil when the world has no clangd.
  local function workspace()
    if not ctx.subprocess:resolveExecutable("clangd") then return nil end
    dir = P.scratch("lsp")
    P.sh("mkdir -p '" .. dir .. "'")
    assert(ctx.fs:writeText(assert(ctx.fs:resolve(dir .. "/main.c")), BROKEN))
    return dir
  end

  it("diagnoses, follows an edit, hovers and finds a definition; shutdown ends the server", function()
    P.run_gc(function()
      if not workspace() then return pending("no clangd in the execution world") end
      local c = assert(ctx.lsp:start{ root = dir })
      assert.is_true(c.pid > 1)
      assert.are.equal("file://" .. dir, c.rootUri)
      assert(c:open("main.c"))
      local d = assert(c:diagnostics("main.c"))
      assert.are.equal(1, #d)
      assert.truthy(d[1].message:find("Expected ';'", 1, true), d[1].message)
      local t = assert(ctx.fs:resolve(dir .. "/main.c"))
      assert(ctx.fs:editText(t, { oldString = "twice(21))\n", newString = "twice(21));\n" }))
      assert(c:change("main.c"))
      assert.are.same({}, assert(c:diagnostics("main.c")))
      local h = assert(c:hover("main.c", { line = 3, character = 18 }))
      assert.truthy(h.contents.value:find("static int twice(int x)", 1, true), h.contents.value)
      local defs = assert(c:definition("main.c", { line = 3, character = 18 }))
      assert.are.equal(dir .. "/main.c", defs[1].path)
      assert.are.equal(1, math.tointeger(defs[1].range.start.line))
      assert(c:shutdown())
      assert.is_true(c.ended)
      local r, err = c:hover("main.c", { line = 3, character = 18 })
      assert.is_nil(r)
      assert.are.equal("LSP_SERVER_EXITED", err.code)
    end)
  end)

  it("costs only the stdin write per request on the E2B providers", function()
    if P.open().name ~= "e2b" then return pending("requests are the E2B providers' cost") end
    P.run_gc(function()
      if not workspace() then return pending("no clangd in the execution world") end
      local c = assert(ctx.lsp:start{ root = dir })
      assert(c:open("main.c"))
      assert(c:diagnostics("main.c"))
      assert.has_error(function() c:diagnostics("main.c", { timeout = 5 }) end,
        "lsp:diagnostics: unknown field timeout (expected timeoutMs; the nearest is timeoutMs)")
      assert.has_error(function() c:request("textDocument/hover", {}, { timeoutMs = -1 }) end,
        "lsp:request: timeoutMs must be a positive finite number of milliseconds")
      local n = P.requests(function() assert(c:hover("main.c", { line = 3, character = 18 })) end)
      assert.are.equal(1, n)
      assert(c:shutdown())
    end)
  end)

  it("refuses documents outside the workspace or over the byte cap, and positions that are not LSP's", function()
    P.run_gc(function()
      if not workspace() then return pending("no clangd in the execution world") end
      local c = assert(ctx.lsp:start{ root = dir, maxDocumentBytes = 100 })
      local r, err = c:open("/etc/passwd")
      assert.is_nil(r)
      assert.are.equal("LSP_OUTSIDE_WORKSPACE", err.code)
      r, err = c:open("../outside.c")
      assert.are.equal("LSP_OUTSIDE_WORKSPACE", err.code)
      r, err = c:open("main.c")
      assert.is_nil(r)
      assert.are.equal("LSP_TOO_LARGE", err.code)
      r, err = c:hover("main.c", { line = 0, character = 0 })
      assert.are.equal("LSP_NOT_OPEN", err.code)
      r, err = c:open("nope.c")
      assert.are.equal("FS_NOT_FOUND", err.code)
      assert.has_error(function() c:hover("main.c", { line = -1, character = 0 }) end,
        "lsp: position must be { line = n, character = n } (0-based integers)")
      assert(c:shutdown())
    end)
  end)

  it("reports a server that dies at start with its stderr, and one that breaks the framing", function()
    P.run_gc(function()
      local root = P.scratch("lsp-bad")
      P.sh("mkdir -p '" .. root .. "'")
      local c, err = ctx.lsp:start{ root = root, command = "sh", args = { "-c", "echo cannot start >&2; exit 3" } }
      assert.is_nil(c)
      assert.are.equal("LSP_SERVER_EXITED", err.code)
      assert.truthy(err.message:find("cannot start", 1, true), err.message)
      c, err = ctx.lsp:start{ root = root, command = "sh", args = { "-c", "printf 'garbage\\r\\n\\r\\n'; sleep 60" } }
      assert.is_nil(c)
      assert.are.equal("LSP_PROTOCOL", err.code)
      assert.truthy(err.message:find('malformed header line "garbage"', 1, true), err.message)
      c, err = ctx.lsp:start{ root = root .. "/missing" }
      assert.are.equal("FS_NOT_FOUND", err.code)
      assert.truthy(err.message:find(root .. "/missing", 1, true), err.message)
      c, err = ctx.lsp:start{ root = "/etc/passwd" }
      assert.are.equal("FS_NOT_DIRECTORY", err.code)
      c, err = ctx.lsp:start{ root = root, command = "no-such-language-server" }
      assert.are.equal("SUBPROCESS_NOT_FOUND", err.code)
    end)
  end)

  it("times out a request the server never answers, and ends a server that ignores shutdown", function()
    P.run_gc(function()
      local root = P.scratch("lsp-mute")
      P.sh("mkdir -p '" .. root .. "'")
      local sleeper = P.named("sleep", "mbx-lsp-mute")
      -- answers initialize and shutdown never: reads stdin forever
      local c, err = ctx.lsp:start{ root = root, command = "sh", startTimeoutMs = 300,
        args = { "-c", "exec " .. sleeper .. " 600" } }
      assert.is_nil(c)
      assert.are.equal("LSP_TIMEOUT", err.code)
      assert.are.same({}, P.survivors("mbx-lsp-mute"))
    end)
  end)

  it("refuses bad options with the field named", function()
    assert.has_error(function() ctx.lsp:start("x") end, "lsp:start: options must be a table")
    assert.has_error(function() ctx.lsp:start{ root = "" } end,
      "lsp:start: root must be a non-empty path (in the call or the plugin's config)")
    assert.has_error(function() ctx.lsp:start{ args = { 1 } } end, "lsp:start: args[1] must be a string")
    assert.has_error(function() ctx.lsp:start{ roots = "/" } end, "lsp:start: unknown field roots (expected root, command, args, env, "
      .. "initializationOptions, languageIds, maxDocumentBytes, requestTimeoutMs, startTimeoutMs; the nearest is root)")
    assert.has_error(function() ctx.lsp:start{ maxDocumentBytes = 0.5 } end,
      "lsp:start: maxDocumentBytes must be a whole number of bytes")
  end)
end)
