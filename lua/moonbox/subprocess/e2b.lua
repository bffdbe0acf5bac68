-- moonbox.subprocess.e2b — plugin "subprocess": the subprocess seam over the composition's E2B
-- sandbox (moonbox.subprocess.service over the world ctx.e2b:sandbox() hands out).
local service = require "moonbox.subprocess.service"

local M = { name = "subprocess", provides = "subprocess", inject = { "e2b" }, schema = service.schema }

function M.new(ctx, config)
  assert(ctx.e2b, "subprocess: the e2b owner must load first")
  return service.new(function() return ctx.e2b:sandbox() end, config, ctx.policies)
end

for _, k in ipairs({ "SIGNALS", "signal_name", "sandbox_gone", "outcome_from_end", "spill_dir", "start_error" }) do
  M[k] = service[k]
end
M.SP = service.SP
return M
