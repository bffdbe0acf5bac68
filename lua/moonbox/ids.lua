-- moonbox.ids — random identifiers (staging names, runtime roots, a local sandboxd's API key).
local M = {}

local urandom

-- n random bytes as 2n lowercase hex digits (from /dev/urandom).
function M.hex(n)
  if not urandom then urandom = assert(io.open("/dev/urandom", "rb")) end
  local bytes = urandom:read(n)
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

return M
