-- moonbox.fs.e2b — plugin "fs": the filesystem seam over the composition's E2B sandbox
-- (moonbox.fs.service over the world ctx.e2b:sandbox() hands out).
local service = require "moonbox.fs.service"

local M = { name = "fs", provides = "fs", inject = { "e2b" }, schema = service.schema }

function M.new(ctx, config)
  assert(ctx.e2b, "fs: the e2b owner must load first")
  return service.new(function() return ctx.e2b:sandbox() end, config, ctx.policies)
end

-- The pure helpers, for callers and specs.
for _, k in ipairs({ "lexical", "file_url", "contains", "parse_stat", "parse_publish", "parse_read", "parse_list", "shielded", "map_err" }) do
  M[k] = service[k]
end
M.FS = service.FS
return M
