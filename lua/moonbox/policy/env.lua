-- moonbox.policy.env — the env policy: its fields, and the rules that apply them.
--
-- Values come from policies/env.lua merged with the user's files (moonbox.policies); bind()
-- puts the rules on the merged table, so a consumer calls `ctx.policies.env.build(ambient,
-- explicit)` and a reload changes what the next call sees.
local S = require "moonbox.policy.schema"

local M = { name = "env" }

local function nonempty(what)
  return S.string{ expected = what, valid = function(v) if v == "" then return "an empty string" end end }
end

M.fields = { "keep_names", "drop_names", "drop_prefixes", "sensitive_words", "drop_patterns" }
M.schema = {
  keep_names = S.list(S.env_name(), { doc = "kept whatever the other rules say (exact)" }),
  drop_names = S.list(S.env_name(), { doc = "always dropped (exact)" }),
  drop_prefixes = S.list(nonempty("a non-empty name prefix"), { doc = "dropped when the name starts with one (case-insensitive)" }),
  sensitive_words = S.list(nonempty("a non-empty word"), { doc = "dropped when the name contains one (case-insensitive)" }),
  drop_patterns = S.list(S.pattern(), { doc = "dropped when the name matches one (Lua patterns)" }),
}

-- How a rule is named in explanations, by the field it comes from.
local RULE_WORD = { keep_names = "name", drop_names = "name", drop_prefixes = "prefix",
  sensitive_words = "word", drop_patterns = "pattern" }

-- The dropping rule that matches `name`: → field, index | nil
local function drop_rule(p, name)
  for i, n in ipairs(p.drop_names) do if n == name then return "drop_names", i end end
  local up = name:upper()
  for i, pre in ipairs(p.drop_prefixes) do
    if up:sub(1, #pre) == pre:upper() then return "drop_prefixes", i end
  end
  for i, w in ipairs(p.sensitive_words) do
    if up:find(w:upper(), 1, true) then return "sensitive_words", i end
  end
  for i, pat in ipairs(p.drop_patterns) do
    if name:find(pat) then return "drop_patterns", i end
  end
  return nil
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

local function sorted_keys(t)
  local names = {}
  for name in pairs(t) do names[#names + 1] = name end
  table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
  return names
end

-- Puts the rules on p (the merged values). origins: field → { where, items = { [i] = where } }.
function M.bind(p, origins)
  local function where(field, i)
    local o = origins[field] or {}
    return (i and o.items and o.items[i]) or o.where
  end
  local function rule(field, i)
    return { rule = ("%s %s"):format(RULE_WORD[field], p[field][i]), where = where(field, i), field = field }
  end

  -- The rule that decides an ambient name: → { verdict = "kept"|"dropped", rule, where, field,
  -- over = the dropping rule a keep_names entry overrules }
  function p.decide(name)
    local dfield, di = drop_rule(p, name)
    for i, n in ipairs(p.keep_names) do
      if n == name then
        local d = rule("keep_names", i)
        d.verdict, d.over = "kept", dfield and rule(dfield, di) or nil
        return d
      end
    end
    if dfield then
      local d = rule(dfield, di)
      d.verdict = "dropped"
      return d
    end
    return { verdict = "kept" }
  end

  -- true when an ambient name must not reach the program.
  function p.dropped(name) return p.decide(name).verdict == "dropped" end

  -- The ambient set minus dropped names (a new table; the input is not modified).
  function p.scrub(ambient)
    local out = {}
    for name, value in pairs(ambient or {}) do
      if type(name) == "string" and type(value) == "string" and not p.dropped(name) then
        out[name] = value
      end
    end
    return out
  end

  p.check_entry = M.check_entry

  -- The final environment: scrub(ambient), then explicit entries override, `false` deletes.
  -- An invalid explicit entry is a caller mistake and raises (before anything is launched).
  function p.build(ambient, explicit)
    local env = p.scrub(ambient)
    if explicit == nil then return env end
    if type(explicit) ~= "table" then error("env must be a table of name = string|false", 2) end
    local names = sorted_keys(explicit)
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
  function p.serialize(env)
    local out = {}
    for i, name in ipairs(sorted_keys(env)) do out[i] = name .. "=" .. env[name] end
    return out
  end

  -- Every name of ambient and explicit, what happens to it and which rule decided, and the
  -- final environment. explicit_where(name) names where an explicit entry came from.
  -- → { entries = { { name, verdict, rule, where, over, was, value } ... }, env } | nil, message
  function p.report(ambient, explicit, explicit_where)
    ambient, explicit = ambient or {}, explicit or {}
    for _, name in ipairs(sorted_keys(explicit)) do
      local msg = M.check_entry(name, explicit[name])
      if msg then return nil, msg end
    end
    local names, seen = {}, {}
    for _, t in ipairs({ ambient, explicit }) do
      for name in pairs(t) do
        if type(name) == "string" and not seen[name] then seen[name] = true; names[#names + 1] = name end
      end
    end
    table.sort(names)
    local env = p.build(ambient, explicit)
    local entries = {}
    for _, name in ipairs(names) do
      local d = ambient[name] ~= nil and p.decide(name) or nil
      local e
      if explicit[name] == nil then
        e = d
      else
        e = { rule = explicit[name] == false and "tombstone" or "explicit entry",
          where = explicit_where and explicit_where(name) or "explicit env" }
        if explicit[name] == false then e.verdict = "deleted"
        elseif d then e.verdict = "overridden"
        else e.verdict = "set" end
        e.was = d
      end
      e.name, e.value = name, env[name]
      entries[#entries + 1] = e
    end
    return { entries = entries, env = env }
  end
  return p
end

return M
