-- The Lua side's module graph, derived from the sources (as tests/c/sandboxd_layers.py does for
-- sandboxd): the layers of lua/README.md, each module requiring only its own layer or those
-- below; no cycle; every require at the top of its file (so a file's header shows what it
-- depends on); no require built at run time.
local LAYERS = {
  { "base", { "moonbox.errors", "moonbox.fields", "moonbox.ids", "moonbox.text", "moonbox.sched", "moonbox.events", "moonbox.cancellation", "moonbox.binaries",
    "moonbox.template", "moonbox.core" } },
  { "transport", { "moonbox.http", "moonbox.proc", "moonbox.pstream" } },
  { "policy", { "moonbox.policy.*", "moonbox.policies", "moonbox.policies.*" } },
  { "neutral world", { "moonbox.world.common", "moonbox.subprocess.spec", "moonbox.subprocess.collector",
    "moonbox.subprocess.handle", "moonbox.subprocess.terminal", "moonbox.fs.paths", "moonbox.fs.lock",
    "moonbox.fs.watch", "moonbox.fs.service", "moonbox.subprocess.service" } },
  { "families", { "moonbox.e2b", "moonbox.e2b.*", "moonbox.world.e2b", "moonbox.world.local", "moonbox.fs.e2b", "moonbox.fs.local",
    "moonbox.subprocess.e2b", "moonbox.subprocess.local" } },
  { "facade", { "moonbox" } },
  { "consumers", { "moonbox.consumers.*", "moonbox.workspace", "moonbox.workspace.*" } },
  { "compositions", { "moonbox.compose", "moonbox.runtime" } },
  { "cli", { "moonbox.cli", "moonbox.cli.*" } },
}

local function layer_of(m)
  for i, l in ipairs(LAYERS) do
    for _, pat in ipairs(l[2]) do
      if pat == m or (pat:sub(-2) == ".*" and m:sub(1, #pat - 1) == pat:sub(1, -2)) then return i end
    end
  end
end

-- every require of a moonbox module: { file, line, from, to, top }
local function requires()
  local out, p = {}, assert(io.popen("find lua/moonbox -name '*.lua' | sort"))
  for f in p:lines() do
    local from = f:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
    local n, code_began = 0, false
    for line in io.lines(f) do
      n = n + 1
      -- the header ends at the first function: a require below it is not at the top
      if line:match("^local function ") or line:match("^function ") then code_began = true end
      if not line:match("^%s*%-%-") then
        for to in line:gmatch("require%s*%(?%s*[\"']([%w_.]+)[\"']") do
          if to == "moonbox" or to:match("^moonbox%.") then
            local top = (line:match("^local [%w_, ]+ = require") or line:match("^[%w_.]+ = require"))
              and not line:find("function", 1, true) and not code_began
            out[#out + 1] = { file = f, line = n, from = from, to = to, top = top and true or false }
          end
        end
      end
      -- a require built at run time hides an edge
      if line:match("require%s*%(%s*[%w_]") and not line:match("^%s*%-%-") then
        out[#out + 1] = { file = f, line = n, from = from, to = "?", top = false, dynamic = true }
      end
    end
  end
  p:close()
  return out
end

describe("the Lua module graph", function()
  local reqs = requires()

  it("puts every module in a layer", function()
    local missing = {}
    for _, r in ipairs(reqs) do
      if not layer_of(r.from) then missing[r.from] = true end
      if r.to ~= "?" and not layer_of(r.to) then missing[r.to] = true end
    end
    assert.are.same({}, missing)
  end)

  it("has no cycle", function()
    local edges = {}
    for _, r in ipairs(reqs) do
      if r.to ~= "?" and r.from ~= r.to then
        edges[r.from] = edges[r.from] or {}
        edges[r.from][r.to] = true
      end
    end
    local state, cycle = {}, nil
    local function visit(m, path)
      if state[m] == "done" or cycle then return end
      if state[m] == "open" then
        local i = 1
        while path[i] ~= m do i = i + 1 end
        cycle = table.concat(path, " -> ", i) .. " -> " .. m
        return
      end
      state[m] = "open"
      path[#path + 1] = m
      local ts = {}
      for t in pairs(edges[m] or {}) do ts[#ts + 1] = t end
      table.sort(ts)
      for _, t in ipairs(ts) do visit(t, path) end
      path[#path] = nil
      state[m] = "done"
    end
    local ms = {}
    for m in pairs(edges) do ms[#ms + 1] = m end
    table.sort(ms)
    for _, m in ipairs(ms) do visit(m, {}) end
    assert.is_nil(cycle)
  end)

  it("requires only its own layer or those below, every require at the top", function()
    local found = {}
    for _, r in ipairs(reqs) do
      local where = ("%s:%d"):format(r.file, r.line)
      if r.dynamic then found[#found + 1] = "a require built at run time (" .. where .. ")"
      else
        local lf, lt = layer_of(r.from), layer_of(r.to)
        if lf and lt and lt > lf then
          found[#found + 1] = ("%s (%s) requires %s (%s), a layer above it (%s)"):format(r.from, LAYERS[lf][1], r.to, LAYERS[lt][1], where)
        end
        if not r.top then found[#found + 1] = ("%s requires %s below the top of its file (%s)"):format(r.from, r.to, where) end
      end
    end
    table.sort(found)
    assert.are.same({}, found)
  end)
end)
