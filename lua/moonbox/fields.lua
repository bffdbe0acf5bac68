-- moonbox.fields — unknown fields are errors: every public call and config that takes a table
-- names a field it does not know, with the nearest valid name when it looks like a typo.
-- A leaf module (it requires nothing), usable from every layer.
local M = {}

-- The name of `names` nearest to `name` (edit distance, case-insensitive; ties: the first
-- listed), or nil when none is within half of name's length (at least 2).
function M.nearest(name, names)
  local a = name:lower()
  local best, best_d
  for _, cand in ipairs(names) do
    local b = cand:lower()
    local prev = {}
    for j = 0, #b do prev[j] = j end
    for i = 1, #a do
      local cur = { [0] = i }
      for j = 1, #b do
        local cost = a:byte(i) == b:byte(j) and 0 or 1
        cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
      end
      prev = cur
    end
    if best_d == nil or prev[#b] < best_d then best, best_d = cand, prev[#b] end
  end
  if best_d and best_d <= math.max(2, #name // 2) then return best end
  return nil
end

-- The first key of t that `fields` (a list) does not name → its message, or nil:
-- "<what>: unknown field <k> (expected a, b, c; the nearest is b)".
function M.unknown(t, fields, what)
  for k in pairs(t) do
    local known = false
    for _, f in ipairs(fields) do
      if k == f then known = true break end
    end
    if not known then
      local near = type(k) == "string" and M.nearest(k, fields)
      return ("%s: unknown field %s (expected %s%s)"):format(what, type(k) == "string" and k or ("[" .. tostring(k) .. "]"),
        table.concat(fields, ", "), near and ("; the nearest is " .. near) or "")
    end
  end
end

-- Raises unknown()'s message at `level` (as error() counts: 2 = the caller of the function that
-- called only).
function M.only(t, fields, what, level)
  local msg = M.unknown(t, fields, what)
  if msg then error(msg, (level or 2) + 1) end
end

return M
