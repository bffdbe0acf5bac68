-- moonbox.policy.schema — the kinds of value a policy field may hold, and their checks.
--
-- A field spec is a table made by one of the constructors below; `spec.expected` says in words
-- what the field takes (it is what every error message quotes), and `check(spec, v)` returns
-- nil when v is acceptable, else a message and, for a list item or a map key, where in the
-- value the problem is (an index or a key). Values are data only: no functions, no userdata.
local fields = require "moonbox.fields"
local M = {}

local function show(v)
  if type(v) == "string" then return ("%q"):format(v) end
  if type(v) == "table" then return "a table" end
  return tostring(v)
end
M.show = show

local function got(v)
  if type(v) == "string" or type(v) == "number" or type(v) == "boolean" then
    return ("got %s %s"):format(math.type(v) or type(v), show(v))
  end
  return "got " .. type(v)
end

-- A number. opts: min, max (inclusive), above (exclusive lower bound), below (exclusive upper
-- bound), integer, expected (the words for messages).
function M.number(opts)
  return { kind = "number", expected = opts.expected, min = opts.min, max = opts.max,
    above = opts.above, below = opts.below, integer = opts.integer, unit = opts.unit, doc = opts.doc }
end

function M.boolean(opts)
  return { kind = "boolean", expected = opts and opts.expected or "true or false", doc = opts and opts.doc }
end

-- A string. opts.valid(v) → nil | message for further rules (e.g. an absolute path).
function M.string(opts)
  return { kind = "string", expected = opts.expected, valid = opts.valid, doc = opts.doc }
end

-- A list (a sequence) of `of`. opts.unique: no value twice.
function M.list(of, opts)
  opts = opts or {}
  return { kind = "list", of = of, unique = opts.unique,
    expected = opts.expected or ("a list of " .. of.expected), doc = opts.doc }
end

-- A map from `key` (a string spec) to `value`. Merged key by key over the defaults; a `false`
-- value removes the key.
function M.map(key, value, opts)
  opts = opts or {}
  return { kind = "map", key = key, value = value,
    expected = opts.expected or ("a table of " .. key.expected .. " = " .. value.expected), doc = opts.doc }
end

-- A value of a shape of its own: opts.check(v) → nil | message [, where in the value] (the
-- message is quoted as is). For nested tables whose rules a plain kind cannot say.
function M.custom(opts)
  return { kind = "custom", expected = opts.expected, check = opts.check, doc = opts.doc }
end

-- Lua patterns are compiled lazily by string.find: a malformed item after one that fails to
-- match is never seen. This walks the whole pattern the way lstrlib.c does and reports what
-- Lua would report. → nil | message
function M.pattern_error(p)
  local i, n = 1, #p
  local caps, stack = {}, {}            -- capture states by number; indexes of open captures
  local function set_end(j)             -- j at '[' → index after the matching ']'
    j = j + 1
    if p:sub(j, j) == "^" then j = j + 1 end
    repeat                              -- the first character is part of the set, even ']'
      if j > n then return nil, "malformed pattern (missing ']')" end
      local c = p:sub(j, j)
      j = j + 1
      if c == "%" then
        if j > n then return nil, "malformed pattern (missing ']')" end
        j = j + 1
      end
    until p:sub(j, j) == "]"
    return j + 1
  end
  if p:sub(1, 1) == "^" then i = 2 end
  while i <= n do
    local c = p:sub(i, i)
    if c == "(" then
      caps[#caps + 1] = "open"
      stack[#stack + 1] = #caps
      if #caps > 32 then return "too many captures" end
      i = i + 1
    elseif c == ")" then
      if #stack == 0 then return "invalid pattern capture" end
      caps[stack[#stack]] = "closed"
      stack[#stack] = nil
      i = i + 1
    elseif c == "%" then
      local d = p:sub(i + 1, i + 1)
      if d == "" then return "malformed pattern (ends with '%')" end
      if d == "b" then
        if i + 3 > n then return "malformed pattern (missing arguments to '%b')" end
        i = i + 4
      elseif d == "f" then
        if p:sub(i + 2, i + 2) ~= "[" then return "missing '[' after '%f' in pattern" end
        local j, err = set_end(i + 2)
        if not j then return err end
        i = j
      elseif d:match("%d") then
        local k = tonumber(d)
        if caps[k] ~= "closed" then return ("invalid capture index %%%d"):format(k) end
        i = i + 2
      else
        i = i + 2
      end
    elseif c == "[" then
      local j, err = set_end(i)
      if not j then return err end
      i = j
    else
      i = i + 1
    end
  end
  if #stack > 0 then return "unfinished capture" end
  return nil
end

-- A Lua pattern (a string that compiles as one).
function M.pattern(opts)
  return M.string{ expected = opts and opts.expected or "a Lua pattern", doc = opts and opts.doc,
    valid = function(v)
      local err = M.pattern_error(v)
      if err then return ("%s is not a Lua pattern: %s"):format(show(v), err) end
    end }
end

-- An environment variable name: non-empty, no '=', no NUL, not starting with '-'.
function M.name_error(v)
  if v == "" then return "an empty name" end
  if v:find("=", 1, true) then return ("%s contains '='"):format(show(v)) end
  if v:find("\0", 1, true) then return ("%s contains NUL"):format(show(v)) end
  if v:sub(1, 1) == "-" then return ("%s begins with '-'"):format(show(v)) end
end

function M.env_name(opts)
  return M.string{ expected = opts and opts.expected or "an environment variable name (no '=', no NUL, no leading '-')",
    valid = M.name_error }
end

local function in_range(spec, v)
  if v ~= v or v == math.huge or v == -math.huge then return false end
  if spec.integer and math.type(v) ~= "integer" and v ~= math.floor(v) then return false end
  if spec.min and v < spec.min then return false end
  if spec.max and v > spec.max then return false end
  if spec.above and v <= spec.above then return false end
  if spec.below and v >= spec.below then return false end
  return true
end

local function is_sequence(t)
  local n = #t
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
  end
  return true
end

-- → nil when v fits spec, else message [, index or key of the offending part]
-- t's keys, sorted (as strings): policy output in a stable order.
function M.sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out, function(a, b) return tostring(a) < tostring(b) end)
  return out
end

-- A table of name = string (metadata, envVars, a map the API carries) → nil | what is wrong.
function M.string_map(t)
  for k, v in pairs(t) do
    if type(k) ~= "string" or k == "" then return ("has a key that is not a non-empty string: %s"):format(tostring(k)) end
    if type(v) ~= "string" then return ("[%q] must be a string, got %s"):format(k, type(v)) end
  end
end

function M.check(spec, v)
  local kind = spec.kind
  if kind == "number" then
    if type(v) ~= "number" or not in_range(spec, v) then return ("expected %s, %s"):format(spec.expected, got(v)) end
  elseif kind == "boolean" then
    if type(v) ~= "boolean" then return ("expected %s, %s"):format(spec.expected, got(v)) end
  elseif kind == "string" then
    if type(v) ~= "string" then return ("expected %s, %s"):format(spec.expected, got(v)) end
    if spec.valid then
      local msg = spec.valid(v)
      if msg then return ("expected %s: %s"):format(spec.expected, msg) end
    end
  elseif kind == "list" then
    if type(v) ~= "table" or not is_sequence(v) then return ("expected %s, %s"):format(spec.expected, got(v)) end
    local seen = {}
    for i, item in ipairs(v) do
      local msg = M.check(spec.of, item)
      if msg then return msg, i end
      if spec.unique then
        if seen[item] then return ("expected %s without repeats: %s is listed twice"):format(spec.expected, show(item)), i end
        seen[item] = true
      end
    end
  elseif kind == "map" then
    if type(v) ~= "table" then return ("expected %s, %s"):format(spec.expected, got(v)) end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      local msg = M.check(spec.key, k)
      if msg then return "key " .. msg, k end
      if v[k] ~= false then
        msg = M.check(spec.value, v[k])
        if msg then return msg, k end
      end
    end
  elseif kind == "custom" then
    local msg, part = spec.check(v)
    if msg then return msg, part end
  else
    error("policy schema: unknown kind " .. tostring(kind), 2)
  end
  return nil
end

-- A deep copy of a value that passed check() (tables of plain values only).
function M.copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = M.copy(x) end
  return out
end

-- Readable form of a value, keys sorted: { "DSH_" } / { a = 1, b = "x" } / 300000
function M.format(v)
  if type(v) ~= "table" then return show(v) end
  if next(v) == nil then return "{}" end
  if #v > 0 then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = M.format(x) end
    return "{ " .. table.concat(parts, ", ") .. " }"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for _, k in ipairs(keys) do
    local key = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k or ("[" .. show(k) .. "]")
    parts[#parts + 1] = key .. " = " .. M.format(v[k])
  end
  return "{ " .. table.concat(parts, ", ") .. " }"
end

-- The name of `names` nearest to `name` (moonbox.fields): unknown fields and options name it.
M.nearest = fields.nearest

-- Structural equality of plain values.
function M.equal(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not M.equal(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

return M
