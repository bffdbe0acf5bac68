-- moonbox.text — text rules shared by the fs providers: fatal UTF-8, NUL sniffing, CRLF style
-- detection/restoration and literal edits. Pure Lua: no pattern is ever built from user text.
local errors = require "moonbox.errors"

local M = {}

M.NUL_SAMPLE = 8192      -- reads: a NUL in the first 8192 bytes means binary
M.STYLE_SAMPLE = 4096    -- edits: the dominant line style is judged on the first 4096 chars

-- true, or false plus the 1-based byte offset of the first invalid sequence. Strict: no
-- overlongs, surrogates or code points above U+10FFFF (Lua 5.4 utf8.len without `lax`).
function M.utf8_valid(s)
  local n, bad = utf8.len(s)
  if n then return true end
  return false, bad
end

-- true when s has a NUL within its first `limit` bytes (all of s when limit is nil).
function M.has_nul(s, limit)
  local at = string.find(s, "\0", 1, true)
  return at ~= nil and (limit == nil or at <= limit)
end

-- nil when s is acceptable text, else an FS_NOT_TEXT error ("binary file" / "invalid UTF-8 text").
function M.check_text(s, nul_limit)
  if M.has_nul(s, nul_limit) then return errors.new("FS_NOT_TEXT", "binary file") end
  if not M.utf8_valid(s) then return errors.new("FS_NOT_TEXT", "invalid UTF-8 text") end
  return nil
end

-- Length of the longest prefix of s that ends on a character boundary, looking only at the last
-- three bytes: a streaming decoder emits that prefix and carries the rest into the next chunk.
local function boundary(s)
  local n = #s
  for back = 0, math.min(3, n - 1) do
    local b = s:byte(n - back)
    if b < 0x80 then return n end                    -- ASCII ends a character
    if b >= 0xF5 then return n end                   -- never valid: let validation judge
    if b >= 0xC0 then                                -- lead byte: is its sequence complete?
      local need = b >= 0xF0 and 4 or b >= 0xE0 and 3 or 2
      if back + 1 >= need then return n end
      return n - back - 1
    end
  end
  return n                                           -- only continuation bytes: let validation judge
end

M.complete_prefix = boundary

-- The second byte's range after each lead byte of a well-formed sequence (Unicode table 3-7),
-- and the sequence's length; every later byte is 80..BF.
local function lead_info(b)
  if b >= 0xC2 and b <= 0xDF then return 2, 0x80, 0xBF end
  if b == 0xE0 then return 3, 0xA0, 0xBF end
  if b == 0xED then return 3, 0x80, 0x9F end          -- no surrogates
  if b >= 0xE1 and b <= 0xEF then return 3, 0x80, 0xBF end
  if b == 0xF0 then return 4, 0x90, 0xBF end          -- no overlongs
  if b >= 0xF1 and b <= 0xF3 then return 4, 0x80, 0xBF end
  if b == 0xF4 then return 4, 0x80, 0x8F end          -- nothing above U+10FFFF
  return nil
end

-- The length of the maximal subpart of an ill-formed sequence at s[i]: the lead byte and the
-- continuation bytes that could still have begun a well-formed sequence (at least 1).
local function maximal_subpart(s, i)
  local need, lo, hi = lead_info(s:byte(i))
  if not need then return 1 end
  local k = 1
  while k < need do
    local c = s:byte(i + k)
    if not c or c < lo or c > hi then break end
    k, lo, hi = k + 1, 0x80, 0xBF
  end
  return k
end

-- s with each maximal subpart of an ill-formed sequence replaced by one U+FFFD (Unicode's
-- recommended practice, as Node, browsers and Python decode): "\xE2\x82" is one U+FFFD, "\xFF\xFE"
-- two. What a console shows; command output is not a seam text and must never make a call fail.
function M.lossy(s)
  if utf8.len(s) then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local len, bad = utf8.len(s, i)
    if len then out[#out + 1] = s:sub(i) break end
    if bad > i then out[#out + 1] = s:sub(i, bad - 1) end
    out[#out + 1] = "\xEF\xBF\xBD"
    i = bad + maximal_subpart(s, bad)
  end
  return table.concat(out)
end

-- s cut to at most `width` characters (UTF-8), the last one "…" when it had to be cut; s as it
-- is when width is nil. (A table row that fits a terminal.)
function M.fit(s, width)
  if not width or width < 2 then return s end
  local n = utf8.len(s)
  if not n or n <= width then return s end
  return s:sub(1, utf8.offset(s, width) - 1) .. "…"
end

-- A streaming text checker with the same rules as check_text across chunk boundaries.
-- :push(chunk) → text (possibly "") | nil, err ; :finish() → "" | nil, err
function M.decoder(nul_limit)
  nul_limit = nul_limit or M.NUL_SAMPLE
  local seen, carry = 0, ""
  local d = {}
  function d:push(chunk)
    if seen < nul_limit then
      local at = string.find(chunk, "\0", 1, true)
      if at and seen + at <= nul_limit then return nil, errors.new("FS_NOT_TEXT", "binary file") end
    end
    seen = seen + #chunk
    local s = carry .. chunk
    local cut = boundary(s)
    local out = s:sub(1, cut)
    carry = s:sub(cut + 1)
    if #carry > 3 or not M.utf8_valid(out) then return nil, errors.new("FS_NOT_TEXT", "invalid UTF-8 text") end
    return out
  end
  function d:finish()
    if carry ~= "" then return nil, errors.new("FS_NOT_TEXT", "invalid UTF-8 text") end
    return ""
  end
  return d
end

-- Literal replace-all of `old` (non-empty) by `new`; returns the result and the match count.
local function replace_plain(s, old, new, limit)
  local parts, pos, count = {}, 1, 0
  while true do
    local a, b = string.find(s, old, pos, true)
    if not a or (limit and count >= limit) then break end
    parts[#parts + 1] = s:sub(pos, a - 1)
    parts[#parts + 1] = new
    pos = b + 1
    count = count + 1
  end
  parts[#parts + 1] = s:sub(pos)
  return table.concat(parts), count
end

-- Number of non-overlapping literal occurrences of `needle` in s.
function M.count(s, needle)
  local _, n = replace_plain(s, needle, "")
  return n
end

function M.normalize_lf(s)
  return (replace_plain(s, "\r\n", "\n"))
end

-- true when CRLF is the dominant line ending in the first STYLE_SAMPLE characters of s:
-- more CRLF than bare LF.
function M.is_crlf(s)
  local stop = utf8.offset(s, M.STYLE_SAMPLE + 1)
  local head = stop and s:sub(1, stop - 1) or s
  local crlf = M.count(head, "\r\n")
  local lf = M.count(head, "\n") - crlf
  return crlf > lf
end

-- LF-normalized text back to CRLF line endings.
function M.restore_crlf(s)
  return (replace_plain(s, "\n", "\r\n"))
end

-- Literal edit on LF-normalized text. → new_text, count | nil, err
-- FS_EDIT_NOT_FOUND: empty old string or no match; FS_AMBIGUOUS_EDIT: several matches
-- without replace_all. `new` is inserted verbatim (no `$&`, `%1` or other substitutions).
function M.literal_edit(s, old, new, replace_all)
  if type(old) ~= "string" or type(new) ~= "string" then error("edit strings must be strings", 2) end
  if old == "" then return nil, errors.new("FS_EDIT_NOT_FOUND", "old_string must be non-empty") end
  local n = M.count(s, old)
  if n == 0 then return nil, errors.new("FS_EDIT_NOT_FOUND", "old_string not found") end
  if n > 1 and not replace_all then
    return nil, errors.new("FS_AMBIGUOUS_EDIT", ("old_string matched %d times"):format(n), { matches = n })
  end
  return (replace_plain(s, old, new)), n
end

-- The whole edit of a file's raw content, as the seam defines it:
-- → { before = LF text, after = LF text, stored = bytes to write, count = n } | nil, err
function M.edit(raw, req)
  local err = M.check_text(raw)              -- edits scan the whole file for NUL
  if err then return nil, err end
  local crlf = M.is_crlf(raw)
  local before = M.normalize_lf(raw)
  local after, n = M.literal_edit(before, M.normalize_lf(req.oldString or req.old or ""),
    M.normalize_lf(req.newString or req.new or ""), req.replaceAll or req.replace_all)
  if not after then return nil, n end
  return { before = before, after = after, stored = crlf and M.restore_crlf(after) or after, count = n }
end

return M
