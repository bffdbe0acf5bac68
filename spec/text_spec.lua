local text = require "moonbox.text"

describe("moonbox.text", function()
  describe("utf8_valid", function()
    local cases = {
      { "ascii", "hello", true },
      { "two-byte", "caf\xC3\xA9", true },
      { "four-byte", "\xF0\x9F\x98\x80", true },
      { "lone continuation", "a\x80b", false },
      { "overlong slash", "\xC0\xAF", false },
      { "surrogate", "\xED\xA0\x80", false },
      { "above U+10FFFF", "\xF4\x90\x80\x80", false },
      { "truncated", "\xE2\x82", false },
    }
    for _, c in ipairs(cases) do
      it(c[1], function() assert.are.equal(c[3], (text.utf8_valid(c[2]))) end)
    end
    it("reports the offset of the first bad byte", function()
      local ok, at = text.utf8_valid("ab\xFFcd")
      assert.is_false(ok); assert.are.equal(3, at)
    end)
  end)

  describe("check_text", function()
    it("rejects a NUL inside the sample as binary", function()
      assert.are.equal("FS_NOT_TEXT", text.check_text("a\0b", 8192).code)
      assert.are.equal("binary file", text.check_text("a\0b", 8192).message)
    end)
    it("ignores a NUL past the sample limit", function()
      assert.is_nil(text.check_text(string.rep("a", 10) .. "\0", 10))
    end)
    it("rejects invalid UTF-8", function()
      assert.are.equal("invalid UTF-8 text", text.check_text("\xFF").message)
    end)
  end)

  describe("lossy", function()
    local FFFD = "\xEF\xBF\xBD"
    -- Unicode's "maximal subpart" practice, the cases of its table 3-8 and around it
    local cases = {
      { "valid text unchanged", "caf\xC3\xA9 \xF0\x9F\x98\x80", "caf\xC3\xA9 \xF0\x9F\x98\x80" },
      { "a truncated 3-byte sequence is one", "a\xE2\x82b", "a" .. FFFD .. "b" },
      { "a truncated 4-byte sequence is one", "\xF0\x9F\x98", FFFD },
      { "two invalid bytes are two", "\xFF\xFE", FFFD .. FFFD },
      { "an overlong is one per byte", "\xC0\xAF", FFFD .. FFFD },
      { "a surrogate is one per byte", "\xED\xA0\x80", FFFD:rep(3) },
      { "above U+10FFFF is one per byte", "\xF4\x90\x80\x80", FFFD:rep(4) },
      { "lone continuations are one each", "\x80\x80", FFFD .. FFFD },
      { "a cut sequence then a valid one", "\xE2\x82\xE2\x82\xAC", FFFD .. "\xE2\x82\xAC" },
      { "a cut sequence at the end", "ok\xE2\x82\xAC\xE2", "ok\xE2\x82\xAC" .. FFFD },
      { "table 3-8", "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
        "a" .. FFFD .. FFFD .. FFFD .. "b" .. FFFD .. "c" .. FFFD .. FFFD .. "d" },
    }
    for _, c in ipairs(cases) do
      it(c[1], function() assert.are.equal(c[3], text.lossy(c[2])) end)
    end

    -- The oracle: Node's TextDecoder (WHATWG), on random byte strings made of the bytes that
    -- matter at UTF-8's edges.
    it("decodes as Node's TextDecoder does", function()
      local node = io.popen("command -v node"):read("l")
      if not node then pending("node is not installed") return end
      local edge = { 0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0,
        0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF }
      math.randomseed(20261203)
      local inputs = {}
      for i = 1, 3000 do
        local b = {}
        for j = 1, math.random(1, 12) do b[j] = string.char(edge[math.random(#edge)]) end
        inputs[i] = table.concat(b)
      end
      local dir = os.tmpname(); os.remove(dir); assert(os.execute("mkdir -p " .. dir))
      local f = assert(io.open(dir .. "/in.hex", "w"))
      for _, s in ipairs(inputs) do f:write((s:gsub(".", function(ch) return ("%02x"):format(ch:byte()) end)), "\n") end
      f:close()
      local script = "const fs=require('fs');const d=new TextDecoder();" ..
        "const out=fs.readFileSync(process.argv[1],'utf8').split('\\n').filter(l=>l.length)" ..
        ".map(h=>Buffer.from(d.decode(Buffer.from(h,'hex')),'utf8').toString('hex'));" ..
        "fs.writeFileSync(process.argv[2],out.join('\\n')+'\\n')"
      assert(os.execute(("%q -e %q %q %q"):format(node, script, dir .. "/in.hex", dir .. "/out.hex")))
      local i = 0
      for line in io.lines(dir .. "/out.hex") do
        i = i + 1
        local want = line:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
        local got = text.lossy(inputs[i])
        if got ~= want then
          error(("input %q: lossy gives %q, TextDecoder %q"):format(inputs[i], got, want))
        end
      end
      os.execute("rm -rf " .. dir)
      assert.are.equal(#inputs, i)
    end)
  end)

  describe("fit", function()
    it("cuts to the width in characters, the last one an ellipsis; leaves what fits", function()
      assert.are.equal("abcdef", text.fit("abcdef", 6))
      assert.are.equal("abcd…", text.fit("abcdef", 5))
      assert.are.equal("éé…", text.fit("ééééé", 3))               -- characters, not bytes
      assert.are.equal("abcdef", text.fit("abcdef", nil))
      assert.are.equal("\xFFabc", text.fit("\xFFabc", 2))         -- not UTF-8: as it is
    end)
  end)

  describe("decoder", function()
    it("carries a character split across chunks", function()
      local d = text.decoder()
      local s = "x\xE2\x82\xACy"               -- x € y
      local out = {}
      for i = 1, #s do out[#out + 1] = assert(d:push(s:sub(i, i))) end
      assert(d:finish())
      assert.are.equal(s, table.concat(out))
      assert.are.equal("x", out[1]); assert.are.equal("", out[2]); assert.are.equal("", out[3])
    end)
    it("fails at finish on a dangling partial character", function()
      local d = text.decoder()
      assert(d:push("ok\xE2\x82"))
      local r, err = d:finish()
      assert.is_nil(r); assert.are.equal("FS_NOT_TEXT", err.code)
    end)
    it("finds a NUL in a later chunk within the sample", function()
      local d = text.decoder(8)
      assert(d:push("abcd"))
      local r, err = d:push("e\0")
      assert.is_nil(r); assert.are.equal("binary file", err.message)
    end)
    it("accepts a NUL after the sample but still validates UTF-8", function()
      local d = text.decoder(4)
      assert(d:push("abcd"))
      assert.are.equal("e\0", d:push("e\0"))
      local r, err = d:push("\xFF")
      assert.is_nil(r); assert.are.equal("invalid UTF-8 text", err.message)
    end)
  end)

  describe("line style", function()
    local cases = {
      { "all CRLF", "a\r\nb\r\n", true },
      { "all LF", "a\nb\n", false },
      { "tie is LF", "a\r\nb\n", false },
      { "majority CRLF", "a\r\nb\r\nc\n", true },
      { "no newline", "abc", false },
    }
    for _, c in ipairs(cases) do
      it(c[1], function() assert.are.equal(c[3], text.is_crlf(c[2])) end)
    end
    it("judges only the first 4096 characters", function()
      local head = string.rep("x\n", 2048)          -- exactly 4096 chars, all LF
      assert.is_false(text.is_crlf(head .. string.rep("y\r\n", 5000)))
      assert.is_true(text.is_crlf(string.rep("y\r\n", 5000) .. head))
    end)
    it("counts characters, not bytes", function()
      -- 4095 two-byte characters then a CRLF pair: both are inside the first 4096+1 chars
      local s = string.rep("\xC3\xA9", 4094) .. "\r\n"
      assert.is_true(text.is_crlf(s))
    end)
    it("normalizes and restores", function()
      assert.are.equal("a\nb\n", text.normalize_lf("a\r\nb\r\n"))
      assert.are.equal("a\r\nb\r\n", text.restore_crlf("a\nb\n"))
      assert.are.equal("a\rb\n", text.normalize_lf("a\rb\r\n"))   -- a bare CR stays
    end)
  end)

  describe("literal_edit", function()
    it("inserts $ and % sequences verbatim", function()
      for _, new in ipairs({ "$&5", "$1", "$$", "$`", "$'", "%1", "%%", "%0" }) do
        assert.are.equal("price: " .. new, (text.literal_edit("price: X", "X", new)))
      end
    end)
    it("matches pattern characters literally", function()
      assert.are.equal("a[b]b", (text.literal_edit("a.*b", ".*", "[b]")))
      assert.are.equal("q(x)", (text.literal_edit("q%(", "%(", "(x)")))
    end)
    it("reports not found and empty old strings", function()
      local r, err = text.literal_edit("abc", "z", "y")
      assert.is_nil(r); assert.are.equal("FS_EDIT_NOT_FOUND", err.code)
      r, err = text.literal_edit("abc", "", "y")
      assert.is_nil(r); assert.are.equal("FS_EDIT_NOT_FOUND", err.code)
    end)
    it("refuses an ambiguous single edit and counts the matches", function()
      local r, err = text.literal_edit("a a a", "a", "b")
      assert.is_nil(r); assert.are.equal("FS_AMBIGUOUS_EDIT", err.code)
      assert.are.equal("old_string matched 3 times", err.message)
    end)
    it("replaces all when asked", function()
      local r, n = text.literal_edit("a a a", "a", "$&", true)
      assert.are.equal("$& $& $&", r); assert.are.equal(3, n)
    end)
    it("does not rescan inserted text", function()
      assert.are.equal("aab", (text.literal_edit("ab", "a", "aa")))
    end)
  end)

  describe("edit (whole-file)", function()
    it("keeps CRLF storage and returns LF text", function()
      local r = assert(text.edit("alpha\r\nbeta\r\ngamma\r\n", { oldString = "beta", newString = "BETA\nbeta2" }))
      assert.are.equal("alpha\r\nBETA\r\nbeta2\r\ngamma\r\n", r.stored)
      assert.are.equal("alpha\nbeta\ngamma\n", r.before)
      assert.are.equal("alpha\nBETA\nbeta2\ngamma\n", r.after)
    end)
    it("matches a CRLF old string against CRLF content", function()
      local r = assert(text.edit("a\r\nb\r\n", { oldString = "a\r\nb", newString = "c" }))
      assert.are.equal("c\r\n", r.stored)
    end)
    it("leaves LF files LF", function()
      assert.are.equal("x\ny\n", assert(text.edit("x\nz\n", { oldString = "z", newString = "y" })).stored)
    end)
    it("rejects a NUL anywhere in the file", function()
      local r, err = text.edit(string.rep("a", 9000) .. "\0", { oldString = "a", newString = "b", replaceAll = true })
      assert.is_nil(r); assert.are.equal("FS_NOT_TEXT", err.code)
    end)
  end)
end)
