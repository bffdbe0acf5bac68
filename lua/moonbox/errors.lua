-- moonbox.errors — the one error type of moonbox, made by C and Lua alike.
--
-- An error is a table { code = "FS_NOT_FOUND", message = "...", <optional fields> } whose
-- metatable is the registry's "moonbox.error" (the C core registers the same one under the
-- same name: whoever is loaded first makes it). tostring(err) is "CODE: message". Every
-- operational failure in moonbox is `nil, err` of this type; programming mistakes raise.
-- The codes are listed once, in core/error_codes.def (errors.codes()); lua/README.md ("Error
-- codes") shows that list.
local core = require "moonbox.core"

local M = {}

local REGISTRY_NAME = "moonbox.error"
local registry = debug.getregistry()
local mt = registry[REGISTRY_NAME]
if mt == nil then
  mt = { __name = REGISTRY_NAME,
    __tostring = function(e) return tostring(e.code) .. ": " .. tostring(e.message) end }
  registry[REGISTRY_NAME] = mt
end
M.mt = mt

-- → err. `fields` are copied in (code and message always win).
function M.new(code, message, fields)
  if type(code) ~= "string" or code == "" then error("errors.new: code must be a non-empty string", 2) end
  local e = {}
  if fields then for k, v in pairs(fields) do e[k] = v end end
  e.code = code
  e.message = message ~= nil and tostring(message) or code
  return setmetatable(e, mt)
end

-- true when x is a moonbox error (of `code`, when given).
function M.is(x, code)
  return getmetatable(x) == mt and (code == nil or x.code == code)
end

-- Every code moonbox has (core/error_codes.def, the one list): { name =, meaning =, modules = }
-- each, in the list's order; codes made at run time are a family: { name = "TOOL_*", prefix =
-- "TOOL_", family = true }.
function M.codes() return core.error_codes end

-- true when `code` is in the list (or of one of its families).
function M.known(code)
  if type(code) ~= "string" then return false end
  for _, c in ipairs(M.codes()) do
    if c.name == code or (c.family and code:sub(1, #c.prefix) == c.prefix and #code > #c.prefix) then return true end
  end
  return false
end

-- A Connect RPC's failure (an envd call, a process stream's stream_error fact) as a moonbox
-- error: E2B_<CODE> ("E2B_NOT_FOUND" for not_found), with connect_code, status and method.
function M.from_connect(method, ccode, message, status)
  return M.new("E2B_" .. string.upper(ccode or "unknown"), ("%s: [%s] %s"):format(method, ccode or "unknown", message or ""),
    { connect_code = ccode, status = status, method = method })
end

-- The seam's filesystem codes.
M.FS = {
  "FS_NOT_FOUND", "FS_NOT_DIRECTORY", "FS_NOT_TEXT", "FS_NOT_REGULAR_FILE", "FS_PERMISSION_DENIED",
  "FS_IO_ERROR", "FS_STALE_VERSION", "FS_NOT_OBSERVED", "FS_AMBIGUOUS_EDIT",
  "FS_EDIT_NOT_FOUND", "FS_ABORTED", "FS_TOO_LARGE", "FS_NOT_EMPTY", "FS_ALREADY_EXISTS", "FS_CROSS_DEVICE",
  "FS_INVALID_TARGET",
}

return M
