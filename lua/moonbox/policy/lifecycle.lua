-- moonbox.policy.lifecycle — the lifecycle policy: its fields, and the lease-renewal rules.
local S = require "moonbox.policy.schema"

local M = { name = "lifecycle" }

M.TEARDOWN_STEPS = { block = true, await_setup = true, stop_renewal = true, cleanup = true, delete = true,
  stop_sandboxd = true }

local function absolute(v)
  if v:sub(1, 1) ~= "/" then return ("%s is not absolute"):format(S.show(v)) end
  if v:find("\0", 1, true) then return ("%s contains NUL"):format(S.show(v)) end
end

-- An absolute path with exactly one "%s" (the owner's random id) and no other directive.
local function id_path(v)
  local bad = absolute(v)
  if bad then return bad end
  local n = select(2, v:gsub("%%s", ""))
  local others = select(2, v:gsub("%%s", ""):gsub("%%", ""))
  if n ~= 1 or others > 0 then return ("%s must contain \"%%s\" exactly once and no other '%%'"):format(S.show(v)) end
end

M.fields = { "default_timeout_ms", "default_cwd", "runtime_root", "wrapper_dir", "renew",
  "renew_below_fraction", "min_renew_interval_ms", "setup_rollback_deletes", "teardown",
  "delete_not_found_is_gone" }
M.schema = {
  default_timeout_ms = S.number{ expected = "a positive number of milliseconds", above = 0, max = 2147483647, unit = "ms",
    doc = "sandbox lease when the e2b plugin sets no timeoutMs" },
  default_cwd = S.string{ expected = "an absolute Linux path", valid = absolute, doc = "cwd when the e2b plugin sets none" },
  runtime_root = S.string{ expected = 'an absolute path with one "%s"', valid = id_path },
  wrapper_dir = S.string{ expected = 'an absolute path with one "%s"', valid = id_path },
  renew = S.boolean{ doc = "renew the lease while the owner is open" },
  renew_below_fraction = S.number{ expected = "a fraction between 0 and 1 (exclusive)", above = 0, below = 1 },
  min_renew_interval_ms = S.number{ expected = "a positive number of milliseconds", above = 0, max = 2147483647, unit = "ms" },
  setup_rollback_deletes = S.number{ expected = "an integer from 0 to 10", min = 0, max = 10, integer = true },
  teardown = S.list(S.string{ expected = "a teardown step (block, await_setup, stop_renewal, cleanup, delete, stop_sandboxd)",
    valid = function(v) if not M.TEARDOWN_STEPS[v] then return ("%s is not a step"):format(S.show(v)) end end },
    { unique = true }),
  delete_not_found_is_gone = S.boolean{},
}

function M.bind(p)
  -- Milliseconds after a grant at which the next renewal is due (nil: never).
  function p.renewal_delay(lease_ms)
    if not p.renew then return nil end
    local d = lease_ms * (1 - p.renew_below_fraction)
    if d < p.min_renew_interval_ms then d = p.min_renew_interval_ms end
    return d
  end
  -- Whether a lease with `remaining_ms` left (of `lease_ms`) should be renewed now.
  function p.should_renew(lease_ms, remaining_ms)
    return p.renew and remaining_ms < lease_ms * p.renew_below_fraction
  end
  return p
end

return M
