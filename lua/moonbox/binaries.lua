-- moonbox.binaries — where this build's programs are (sandboxd, mbwrap): found the same way by
-- the E2B owner (mbwrap to upload), the local sandboxd's launcher and the host world.
local core = require "moonbox.core"

local M = {}

-- getenv(name), with an empty value counting as unset.
local function env_value(getenv, name)
  local v = getenv(name)
  if v == nil or v == "" then return nil end
  return v
end

-- The running program when it is the moonbox executable (not a Lua interpreter): its path.
function M.moonbox_exe()
  local exe = core.exe_path()
  if exe and exe:match("/moonbox$") then return exe end
  return nil
end

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() return true end
  return false
end

-- A helper binary of this build: $<env_name>, else next to the running moonbox executable,
-- else $MB_BUILD_DIR/bin, else the installed tree these modules belong to (<prefix>/bin,
-- <prefix>/libexec/moonbox), else the build dir of the loaded C core
-- (<build>/lib/moonbox/core.so), else <source>/build/bin. `getenv` and `exe` (the moonbox executable, or false) are for specs.
function M.find(env_name, name, getenv, exe)
  getenv = getenv or os.getenv
  local v = env_value(getenv, env_name)
  if v then return v end
  local dirs = {}
  if exe == nil then exe = M.moonbox_exe() end
  if exe then dirs[#dirs + 1] = exe:match("^(.*)/[^/]*$") end
  local build = env_value(getenv, "MB_BUILD_DIR")
  if build then dirs[#dirs + 1] = build .. "/bin" end
  local source = debug.getinfo(1, "S").source
  local prefix = source:match("^@(.*)/share/lua/5%.4/moonbox/binaries%.lua$")
  if prefix then
    dirs[#dirs + 1] = prefix .. "/bin"
    dirs[#dirs + 1] = prefix .. "/libexec/moonbox"
  end
  local so = package.searchpath and package.searchpath("moonbox.core", package.cpath)
  local sobuild = so and so:match("^(.*)/lib/moonbox/core%.so$")
  if sobuild then dirs[#dirs + 1] = sobuild .. "/bin" end
  -- next to the Lua tree: <root>/lua/moonbox/binaries.lua → <root>/build/bin/<name>
  local here = source:match("^@(.*)/lua/moonbox/binaries%.lua$")
  if here then dirs[#dirs + 1] = here .. "/build/bin" end
  for _, d in ipairs(dirs) do
    local p = d .. "/" .. name
    if exists(p) then return p end
  end
  return nil
end

return M
