-- moonbox.errors — seam error helpers. Errors are mb.error tables when the core is loaded
-- (so mb.is_error recognizes them); pure modules (text, compose loader) work without the core.
local M = {}

local fallback_mt = {
  __tostring = function(e) return tostring(e.code) .. ": " .. tostring(e.message) end,
}

-- The core is loaded once on first use when it is available (then mb.is_error holds for every
-- error made here); without it (pure specs) errors are plain tables with the same shape.
local core_missing = false
local function mb_module()
  local mb = package.loaded["moonbox"]
  if mb == nil and not core_missing then
    local ok, m = pcall(require, "moonbox")
    if ok then mb = m else core_missing = true end
  end
  if type(mb) == "table" and mb.error then return mb end
  return nil
end

-- err table {code=, message=, ...fields}; `__tostring` gives "CODE: message".
function M.new(code, message, fields)
  assert(type(code) == "string", "error code must be a string")
  local mb = mb_module()
  if mb then return mb.error(code, message, fields) end
  local e = { code = code, message = message or code }
  for k, v in pairs(fields or {}) do if e[k] == nil then e[k] = v end end
  return setmetatable(e, fallback_mt)
end

function M.is(x, code)
  if type(x) ~= "table" or type(x.code) ~= "string" then return false end
  return code == nil or x.code == code
end

-- The seam's filesystem codes and the transport codes this family produces.
M.FS = {
  "FS_NOT_FOUND", "FS_NOT_DIRECTORY", "FS_NOT_TEXT", "FS_NOT_REGULAR_FILE", "FS_PERMISSION_DENIED",
  "FS_SANDBOX_DENIED", "FS_IO_ERROR", "FS_STALE_VERSION", "FS_NOT_OBSERVED", "FS_AMBIGUOUS_EDIT",
  "FS_EDIT_NOT_FOUND", "FS_ABORTED", "FS_TOO_LARGE",
}

return M
