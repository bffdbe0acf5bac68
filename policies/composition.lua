-- policies/composition.lua — which plugins exist and in what order they load and dispose.
-- A plugin is a Lua module returning { name, provides, inject = {...}, schema, new(ctx, config) }.
local M = {}

-- Plugin name (as written in a composition) → Lua module.
M.plugins = {
  e2b = "moonbox.e2b",
  fs = "moonbox.fs.e2b",
  subprocess = "moonbox.subprocess.e2b",
  ["fs-local"] = "moonbox.fs.local",
  ["subprocess-local"] = "moonbox.subprocess.local",
  -- consumers: written against the seams only, so they run on either provider family
  bash = "moonbox.consumers.bash",
  terminal = "moonbox.consumers.terminal",
  lsp = "moonbox.consumers.lsp",
}

-- Tie-break among plugins whose dependencies are all loaded: lower rank loads first; unranked
-- plugins follow in file order. The owner has no dependencies, so it always comes first.
M.rank = { e2b = 1, fs = 2, subprocess = 3, ["fs-local"] = 2, ["subprocess-local"] = 3 }

-- Load order: every plugin after all plugins providing what it injects (Kahn's algorithm).
-- `list` holds { name=, provides=, inject={...}, index= } records. Returns the ordered list, or
-- nil plus a message naming the cycle or the missing dependency.
function M.order(list)
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
    local ra, rb = M.rank[a.name] or math.huge, M.rank[b.name] or math.huge
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

-- Disposal: the reverse of load order (the owner is disposed last).
function M.dispose_order(loaded)
  local out = {}
  for i = #loaded, 1, -1 do out[#out + 1] = loaded[i] end
  return out
end

return M
