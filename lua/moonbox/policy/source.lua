-- moonbox.policy.source — running one policy file, and where each of its fields is written.
--
-- A policy file is plain Lua, run afresh every time it is loaded (editing it never needs a
-- rebuild). It either returns a table of fields:
--     return { drop_prefixes = { "DSH_", "AWS_" } }
-- or assigns them as globals:
--     drop_prefixes = { "DSH_", "AWS_" }
-- It sees the standard globals and `defaults`, a copy of the shipped values, so that a list can
-- be extended rather than replaced:  drop_prefixes = { "AWS_", table.unpack(defaults.drop_prefixes) }
-- Assigned globals give their line exactly; the fields of a returned table (and the items of a
-- list) are located by scanning the file's tokens, so messages can name file:line.
local M = {}

-- Lua tokens with their line: { kind = "name"|"string"|"number"|"op", text, line }. Comments
-- and whitespace are skipped; only what locate() needs is distinguished.
local function tokens(src)
  local out, i, line, n = {}, 1, 1, #src
  local function newlines(a, b)
    local _, k = src:sub(a, b):gsub("\n", "")
    return k
  end
  local function long_bracket(at)       -- at '[': → end index of the closing bracket, or nil
    local eq = src:match("^%[(=*)%[", at)
    if not eq then return nil end
    local _, stop = src:find("]" .. eq .. "]", at + #eq + 2, true)
    return stop or n
  end
  while i <= n do
    local c = src:sub(i, i)
    if c == "\n" then
      line, i = line + 1, i + 1
    elseif c:match("%s") then
      i = i + 1
    elseif src:sub(i, i + 1) == "--" then
      local stop = src:sub(i + 2, i + 2) == "[" and long_bracket(i + 2)
      if stop then
        line, i = line + newlines(i, stop), stop + 1
      else
        i = (src:find("\n", i, true) or n + 1)
      end
    elseif c == "[" and src:match("^%[=*%[", i) then
      local stop = long_bracket(i)
      out[#out + 1] = { kind = "string", text = src:sub(i, stop), line = line }
      line, i = line + newlines(i, stop), stop + 1
    elseif c == '"' or c == "'" then
      local j, start = i + 1, line
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then
          if src:sub(j + 1, j + 1) == "\n" then line = line + 1 end
          j = j + 2
        elseif d == c or d == "\n" then
          break
        else
          j = j + 1
        end
      end
      out[#out + 1] = { kind = "string", text = src:sub(i, j), line = start }
      i = j + 1
    elseif c:match("[%a_]") then
      local name = src:match("^[%w_]+", i)
      out[#out + 1] = { kind = "name", text = name, line = line }
      i = i + #name
    elseif c:match("%d") or (c == "." and src:sub(i + 1, i + 1):match("%d")) then
      local num = src:match("^[%w%.]+", i)
      while num:match("[eEpP]$") and src:sub(i + #num, i + #num):match("[%+%-]") do
        num = num .. src:match("^[%+%-][%w%.]*", i + #num)
      end
      out[#out + 1] = { kind = "number", text = num, line = line }
      i = i + #num
    else
      local op = src:match("^%.%.%.", i) or src:match("^[=~<>/:%.][=/:%.<>]", i) or c
      if op ~= c and not (op == "==" or op == "~=" or op == "<=" or op == ">=" or op == "//"
          or op == "::" or op == ".." or op == "<<" or op == ">>" or op == "...") then
        op = c
      end
      out[#out + 1] = { kind = "op", text = op, line = line }
      i = i + #op
    end
  end
  return out
end

local OPEN = { ["{"] = "}", ["("] = ")", ["["] = "]" }
local CLOSE = { ["}"] = true, [")"] = true, ["]"] = true }
-- Tokens after which `name =` is not an assignment to a global field.
local NOT_TARGET = { ["local"] = true, ["for"] = true, ["function"] = true, ["."] = true, [":"] = true,
  [","] = true, ["goto"] = true }

-- → lines (field → line of its key), items (field → { [i] = line of the i-th list item }),
--   return_line (line of the first top-level `return`, or nil), keys (field → { [key] = line
--   of `key =` or `["key"] =` directly inside the field's table: a map's entries)
function M.locate(src)
  local toks = tokens(src)
  local lines, items, return_line, keys = {}, {}, nil, {}
  -- Open brackets. A frame may be the returned table (`top`: keys directly inside are fields)
  -- or a field's table value (`field`: its items are counted).
  local stack = {}
  local value_at, top_next = {}, false  -- token index where a field's value starts → field
  local function key_at(k)              -- "name =" or '["name"] =' at k → the key, value index
    local t, nx = toks[k], toks[k + 1]
    if t.kind == "name" and nx and nx.text == "=" then return t.text, k + 2 end
    if t.text == "[" and nx and nx.kind == "string" and toks[k + 2] and toks[k + 2].text == "]"
        and toks[k + 3] and toks[k + 3].text == "=" and nx.text:sub(1, 1) ~= "[" then
      return nx.text:sub(2, -2), k + 4
    end
  end
  local function found(field, line, at)
    if lines[field] == nil then lines[field] = line end
    value_at[at] = field
  end
  for k, t in ipairs(toks) do
    local value_of = value_at[k]
    local frame = stack[#stack]
    if value_of and t.text == "{" then
      if items[value_of] == nil then items[value_of] = {} end
      stack[#stack + 1] = { field = value_of, elem = 0, fresh = true }
      goto continue
    end
    if frame and frame.field then
      if t.text == "," or t.text == ";" then
        frame.fresh = true
      elseif frame.fresh and not CLOSE[t.text] then
        frame.elem, frame.fresh = frame.elem + 1, false
        local list = items[frame.field]
        if list[frame.elem] == nil then list[frame.elem] = t.line end
        local key = key_at(k)
        if key then
          keys[frame.field] = keys[frame.field] or {}
          if keys[frame.field][key] == nil then keys[frame.field][key] = t.line end
        end
      end
    end
    if not frame then
      if t.text == "return" then
        return_line = return_line or t.line
        top_next = toks[k + 1] ~= nil and toks[k + 1].text == "{"
      else
        local field, at = key_at(k)
        local prev = toks[k - 1]
        if field and not (prev and NOT_TARGET[prev.text]) then
          found(field, t.line, at)
        elseif field and prev.text == "." and toks[k - 2] and toks[k - 2].kind == "name"
            and not (toks[k - 3] and (toks[k - 3].text == "." or toks[k - 3].text == ":")) then
          found(field, t.line, at)      -- M.field = ... (a module-style file)
        end
      end
    elseif frame.top then
      if t.text == "," or t.text == ";" then
        frame.fresh = true
      elseif frame.fresh then
        frame.fresh = false
        local field, at = key_at(k)
        if field then found(field, t.line, at) end
      end
    end
    if OPEN[t.text] then
      stack[#stack + 1] = { top = (#stack == 0 and top_next and t.text == "{") or nil, fresh = true }
      top_next = false
    elseif CLOSE[t.text] then
      stack[#stack] = nil
    end
    ::continue::
  end
  return lines, items, return_line, keys
end

local function errno_text(msg)
  return (tostring(msg):gsub("^[^:]*: ", ""))
end

-- Runs the policy file at `path`. `defaults` (plain values) is offered to it as `defaults`.
-- → { path, fields, lines, items, keys, return_line } | nil, one-line message naming path[:line]
function M.read(path, defaults)
  local f, oerr = io.open(path, "rb")
  if not f then return nil, ("cannot read %s: %s"):format(path, errno_text(oerr)) end
  local src = f:read("a")
  f:close()
  if not src then return nil, ("cannot read %s"):format(path) end
  local assigned, assigned_lines = {}, {}
  local chunkname = "@" .. path
  local env = setmetatable({}, {
    __index = function(_, k)
      if k == "defaults" then return defaults end
      local v = assigned[k]
      if v ~= nil then return v end
      return _G[k]
    end,
    __newindex = function(_, k, v)
      local info = debug.getinfo(2, "Sl")
      if info and info.source == chunkname then assigned_lines[k] = info.currentline end
      assigned[k] = v
    end,
  })
  local chunk, lerr = load(src, chunkname, "t", env)
  if not chunk then return nil, tostring(lerr) end
  local ok, ret = pcall(chunk)
  local lines, items, return_line, keys = M.locate(src)
  if not ok then
    if type(ret) == "string" then
      if ret:sub(1, #path + 1) ~= path .. ":" then ret = path .. ": " .. ret end
      return nil, (ret:gsub("\n.*", ""))
    end
    return nil, ("%s: the policy raised a %s"):format(path, type(ret))
  end
  local fields = {}
  for k, v in pairs(assigned) do fields[k] = v end
  if ret ~= nil then
    if type(ret) ~= "table" then
      return nil, ("%s:%d: a policy file returns a table of fields (or assigns them), got %s"):format(path,
        return_line or 1, type(ret))
    end
    for k, v in pairs(ret) do
      if fields[k] ~= nil then
        return nil, ("%s:%d: field %s: set twice (assigned at line %d and returned)"):format(path,
          lines[k] or return_line or 1, tostring(k), assigned_lines[k] or 0)
      end
      fields[k] = v
    end
  end
  for k, l in pairs(assigned_lines) do lines[k] = l end
  return { path = path, fields = fields, lines = lines, items = items, keys = keys, return_line = return_line }
end

M.tokens = tokens
return M
