-- moonbox.subprocess.local — plugin "subprocess-local": the subprocess seam on this host, with
-- the same contract and semantics as the E2B provider: every spawn runs under the same mbwrap
-- (a new session and process group, exactly the scrubbed environment, exit code or real
-- signal, whole-tree TERM→grace→KILL, "tree empty"), its output decoded by the same C decoder
-- into the same sinks; terminals are host PTYs. The ambient environment is this process's,
-- scrubbed by the same policy (scrubbedParentEnv).
local service = require "moonbox.subprocess.service"
local world_local = require "moonbox.world.local"
local policy_set = require "moonbox.policies"

local M = { name = "subprocess-local", provides = "subprocess", inject = {}, schema = service.schema }

function M.new(ctx, config)
  local policies = ctx.policies or {}
  local world, dispose = world_local.lazy{ timeouts = policies.timeouts or policy_set.default("timeouts") }
  local sp = service.new(world, config, policies, dispose)
  -- The host environment scrubbed by the env policy (the seam's scrubbedParentEnv).
  function sp.scrubbedParentEnv()
    local pw = world()
    return (policies.env or policy_set.default("env")).scrub(pw and pw.ambient or {})
  end
  return sp
end

return M
