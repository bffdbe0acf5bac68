-- Packaging that can drift from the tree: the rockspec must list every Lua module and shipped
-- policy (luarocks' builtin type installs only what it lists) and carry the header's version
-- family; the installed layout itself is exercised by scripts/test.sh (cmake --install).
describe("the rockspec", function()
  local spec = {}
  local f = assert(io.open("moonbox-dev-1.rockspec"))
  local chunk = load(f:read("a"), "=moonbox-dev-1.rockspec", "t", spec)   -- busted's loadfile ignores env
  f:close()
  chunk()
  local modules = spec.build.modules

  local function files(cmd)
    local out, p = {}, assert(io.popen(cmd))
    for l in p:lines() do out[#out + 1] = l end
    p:close()
    table.sort(out)
    return out
  end

  it("lists every Lua module of lua/ and every shipped policy, and nothing else", function()
    local want = {}
    for _, f in ipairs(files("find lua/moonbox -name '*.lua'")) do
      local name = f:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
      want[name] = f
    end
    for _, f in ipairs(files("ls policies/*.lua")) do
      want["moonbox.policies." .. f:match("([^/]+)%.lua$")] = f
    end
    local got = {}
    for name, v in pairs(modules) do if type(v) == "string" then got[name] = v end end
    assert.are.same(want, got)
  end)

  it("builds moonbox.core from every binding file and the codec and transport it needs", function()
    local srcs = {}
    for _, s in ipairs(modules["moonbox.core"].sources) do srcs[s] = true end
    for _, f in ipairs(files("ls core/lua_*.c")) do assert.is_true(srcs[f], f) end
    for _, s in ipairs(modules["moonbox.core"].sources) do
      local f = io.open(s); assert.is_not_nil(f, s); f:close()
    end
  end)
end)
