-- moonbox.fs.paths — pure path helpers in the execution world's syntax (POSIX), shared by the
-- filesystem providers.
local M = {}

-- Lexical absolute path: cwd-joined, "." and ".." and duplicate slashes removed.
function M.lexical(path, cwd)
  local full = path:sub(1, 1) == "/" and path or (cwd .. "/" .. path)
  local parts = {}
  for seg in full:gmatch("[^/]+") do
    if seg == ".." then parts[#parts] = nil
    elseif seg ~= "." then parts[#parts + 1] = seg end
  end
  return "/" .. table.concat(parts, "/")
end

-- file: URI with every byte outside the unreserved set percent-encoded, per segment.
function M.file_url(path)
  if path:sub(1, 1) ~= "/" then error("fileUrl: target path is not absolute: " .. path, 2) end
  local enc = path:gsub("[^%w%-%._~!%*'%(%)/]", function(c) return ("%%%02X"):format(c:byte()) end)
  return "file://" .. enc
end

-- Is child the parent itself or below it? (canonical absolute paths)
function M.contains(parent, child)
  if child == parent then return true end
  local p = parent:sub(-1) == "/" and parent or (parent .. "/")
  return child:sub(1, #p) == p
end

-- The directory part of an absolute path ("/" for top-level names).
function M.dirname(path)
  local dir = path:match("^(.*)/[^/]*$")
  if dir == nil or dir == "" then return "/" end
  return dir
end

-- A target as the seam defines it, or a raise naming the argument (a programming mistake:
-- a path string where a target from fs:resolve belongs).
function M.check_target(t, what, level)
  if type(t) ~= "table" or type(t.targetKey) ~= "string" or type(t.displayPath) ~= "string" then
    local got = type(t) == "string" and ("string %q"):format(t) or type(t)
    error(("%s: expected a target from fs:resolve(path), got %s"):format(what, got), (level or 2) + 1)
  end
  return t
end

return M
