-- moonbox.fs.local — plugin "fs-local": the filesystem seam over this host, with the same
-- contract, codes, versions, atomic writes and literal CRLF-keeping edits as the E2B provider
-- (moonbox.fs.service over moonbox.world.local: the same mbwrap answers every question, as the
-- user moonbox runs as). Config: cwd (where relative paths resolve; default: the process's).
local service = require "moonbox.fs.service"
local world_local = require "moonbox.world.local"
local policy_set = require "moonbox.policies"

local M = { name = "fs-local", provides = "fs", inject = {}, schema = {} }
for k, v in pairs(service.schema) do M.schema[k] = v end
M.schema.cwd = { type = "string",
  check = function(v) if v:sub(1, 1) ~= "/" then return "must be an absolute path: " .. v end end }

function M.new(ctx, config)
  local policies = ctx.policies or {}
  local world, dispose = world_local.lazy{ cwd = config.cwd, timeouts = policies.timeouts or policy_set.default("timeouts") }
  return service.new(world, config, policies, dispose)
end

return M
