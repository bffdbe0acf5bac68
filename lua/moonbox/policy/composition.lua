-- moonbox.policy.composition — the composition policy: its fields, and load/dispose order.
local S = require "moonbox.policy.schema"

local M = { name = "composition" }

local plugin_name = S.string{ expected = "a plugin name", valid = function(v)
  if not v:match("^[%a_][%w_%-]*$") then return ("%s is not a plugin name (letters, digits, _ and -)"):format(S.show(v)) end
end }

M.fields = { "plugins", "rank" }
M.schema = {
  plugins = S.map(plugin_name, S.string{ expected = "a Lua module name", valid = function(v)
    if not v:match("^[%a_][%w_]*[%w_.]*$") or v:find("..", 1, true) or v:sub(-1) == "." then
      return ("%s is not a module name"):format(S.show(v))
    end
  end }, { doc = "plugin name → Lua module" }),
  rank = S.map(plugin_name, S.number{ expected = "a finite number" }, { doc = "tie-break: lower loads first" }),
}

-- Load order: every plugin after all plugins providing what it injects (Kahn's algorithm).
-- `list` holds { name=, provides=, inject={...}, index= } records. Returns the ordered list, or
-- nil plus a message naming the cycle or the missing dependency.
local function order(rank, list)
  local by_service = {}
  for _, p in ipairs(list) do by_service[p.provides or p.name] = p end
  for _, p in ipairs(list) do
    for _, dep in ipairs(p.inject or {}) do
      if not by_service[dep] then
        return nil, ("plugin %q injects %q, which no plugin in the composition provides"):format(p.name, dep), p
      end
    end
  end
  local done, out = {}, {}
  local function ready(p)
    for _, dep in ipairs(p.inject or {}) do
      if not done[by_service[dep]] then return false end
    end
    return true
  end
  local function before(a, b)
    local ra, rb = rank[a.name] or math.huge, rank[b.name] or math.huge
    if ra ~= rb then return ra < rb end
    return (a.index or 0) < (b.index or 0)
  end
  while #out < #list do
    local best
    for _, p in ipairs(list) do
      if not done[p] and ready(p) and (best == nil or before(p, best)) then best = p end
    end
    if not best then
      -- Walk unmet dependencies from any stuck plugin until one repeats: that loop is the cycle.
      local p, seen, path = nil, {}, {}
      for _, q in ipairs(list) do if not done[q] then p = q break end end
      while not seen[p] do
        seen[p] = #path + 1
        path[#path + 1] = p
        for _, dep in ipairs(p.inject or {}) do
          local q = by_service[dep]
          if not done[q] then p = q break end
        end
      end
      local names = {}
      for i = seen[p], #path do names[#names + 1] = path[i].name end
      names[#names + 1] = p.name
      return nil, "dependency cycle: " .. table.concat(names, " -> "), path[seen[p]]
    end
    done[best] = true
    out[#out + 1] = best
  end
  return out
end

function M.bind(p)
  function p.order(list) return order(p.rank, list) end
  -- Disposal: the reverse of load order (the owner is disposed last).
  function p.dispose_order(loaded)
    local out = {}
    for i = #loaded, 1, -1 do out[#out + 1] = loaded[i] end
    return out
  end
  return p
end

return M
