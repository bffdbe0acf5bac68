-- Packaging that can drift from the tree: the rock is built by the project's CMake (so every
-- Lua module, policy and program is in it by construction: scripts/test.sh builds the rock and
-- runs the demo from it); what is checked here is that the rockspec says so and installs on the
-- rock tree's paths.
describe("the rockspec", function()
  local spec = {}
  local f = assert(io.open("moonbox-dev-1.rockspec"))
  local chunk = load(f:read("a"), "=moonbox-dev-1.rockspec", "t", spec)   -- busted's loadfile ignores env
  f:close()
  chunk()

  it("builds with the project's CMake into the rock tree's layout", function()
    assert.are.equal("cmake", spec.build.type)
    assert.are.same({ CMAKE_INSTALL_PREFIX = "$(PREFIX)", MB_ROCK = "ON", MB_INSTALL_LMOD = "lua",
      MB_INSTALL_CMOD = "lib", MB_INSTALL_HELPERS = "bin" }, spec.build.variables)
    -- every variable it sets is one the CMake project declares
    local cm = assert(io.open("CMakeLists.txt")):read("a")
    for k in pairs(spec.build.variables) do
      if k ~= "CMAKE_INSTALL_PREFIX" then assert.truthy(cm:find(k, 1, true), k) end
    end
  end)
end)
