-- policies/env.lua — which environment a sandboxed program gets.
-- Edit freely: moonbox loads this file at run time (no rebuild). The sandbox's ambient login
-- environment is captured once per sandbox; `build` is applied on the host for every spawn and
-- terminal, and its result is sent with the spawn. The API key never enters the sandbox.
local M = {}

-- Names starting with one of these (compared upper-cased) are dropped from the ambient set.
M.drop_prefixes = { "DSH_" }

-- Names containing one of these (case-insensitive substring) are dropped from the ambient set.
M.sensitive_words = { "KEY", "PASSWORD", "SECRET", "TOKEN" }

-- Names always dropped from the ambient set, whatever they look like.
M.drop_names = {}

-- true when an ambient name must not reach the program.
function M.dropped(name)
  local up = string.upper(name)
  if M.drop_names[name] then return true end
  for _, p in ipairs(M.drop_prefixes) do
    if up:sub(1, #p) == string.upper(p) then return true end
  end
  for _, w in ipairs(M.sensitive_words) do
    if up:find(string.upper(w), 1, true) then return true end
  end
  return false
end

-- The ambient set minus dropped names (a new table; the input is not modified).
function M.scrub(ambient)
  local out = {}
  for name, value in pairs(ambient or {}) do
    if type(name) == "string" and type(value) == "string" and not M.dropped(name) then
      out[name] = value
    end
  end
  return out
end

-- nil when an explicit entry is acceptable, else a message naming it.
-- A `false` value is a tombstone (deletes the ambient entry); explicit strings are a deliberate
-- opt-in, so a sensitive or DSH_ name given explicitly survives.
function M.check_entry(name, value)
  if type(name) ~= "string" then
    return ("environment entry name must be a string, got %s"):format(type(name))
  end
  local shown = ("%q"):format(name)
  if name == "" then return "environment entry has an empty name" end
  if name:find("=", 1, true) then return ("environment entry %s: name contains '='"):format(shown) end
  -- a leading '-' reads as an option to whatever parses a command line (env(1) did)
  if name:sub(1, 1) == "-" then return ("environment entry %s: name begins with '-'"):format(shown) end
  if name:find("\0", 1, true) then return ("environment entry %s: name contains NUL"):format(shown) end
  if value == false then return nil end
  if type(value) ~= "string" then
    return ("environment entry %s: value must be a string or false (tombstone), got %s"):format(shown, type(value))
  end
  if value:find("\0", 1, true) then return ("environment entry %s: value contains NUL"):format(shown) end
  return nil
end

-- The final environment: scrub(ambient), then explicit entries override, `false` deletes.
-- An invalid explicit entry is a caller mistake and raises (before anything is launched).
function M.build(ambient, explicit)
  local env = M.scrub(ambient)
  if explicit == nil then return env end
  if type(explicit) ~= "table" then error("env must be a table of name = string|false", 2) end
  local names = {}
  for name in pairs(explicit) do names[#names + 1] = name end
  table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
  for _, name in ipairs(names) do
    local msg = M.check_entry(name, explicit[name])
    if msg then error(msg, 2) end
  end
  for _, name in ipairs(names) do
    local value = explicit[name]
    if value == false then env[name] = nil else env[name] = value end
  end
  return env
end

-- Sorted "NAME=value" list: a deterministic wire form.
function M.serialize(env)
  local names = {}
  for name in pairs(env) do names[#names + 1] = name end
  table.sort(names)
  local out = {}
  for i, name in ipairs(names) do out[i] = name .. "=" .. env[name] end
  return out
end

return M
