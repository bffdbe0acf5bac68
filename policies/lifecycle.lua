-- policies/lifecycle.lua — the sandbox lease, its renewal, setup rollback and teardown order.
local M = {}

M.default_timeout_ms = 300000   -- lease asked for at create/connect (E2B counts whole seconds)
M.default_cwd = "/home/user/workspace"
-- The private runtime root lives outside cwd so it never shows up in the user's listings.
-- "%s" is replaced by a random id per sandbox owner. It is always made 0700 and verified to be
-- a real directory (not a symlink) before use; that part is not a policy.
M.runtime_root = "/tmp/.moonbox-%s"

-- Lease renewal: while the owner is open, renew once less than this fraction of the lease is
-- left. Set `renew = false` to let the sandbox expire after timeoutMs like E2B's default.
M.renew = true
M.renew_below_fraction = 0.5
M.min_renew_interval_ms = 1000

-- Milliseconds after a grant at which the next renewal is due (nil: never).
function M.renewal_delay(lease_ms)
  if not M.renew then return nil end
  local d = lease_ms * (1 - M.renew_below_fraction)
  if d < M.min_renew_interval_ms then d = M.min_renew_interval_ms end
  return d
end

-- Whether a lease with `remaining_ms` left (of `lease_ms`) should be renewed now.
function M.should_renew(lease_ms, remaining_ms)
  return M.renew and remaining_ms < lease_ms * M.renew_below_fraction
end

-- Setup failure: delete the half-made sandbox this many times (errors from the delete are
-- dropped) and report the original setup error.
M.setup_rollback_deletes = 1

-- Teardown: what the owner does, in this order, when the composition is disposed.
-- "block"  → new acquisitions fail with E2B_DISPOSING;
-- "await_setup" → wait for creation/setup to settle (a failed setup needs no delete);
-- "stop_renewal" → stop the lease renewer;
-- "delete" → DELETE the sandbox; "not found" counts as already gone;
-- "stop_sandboxd" → stop the local sandboxd if this owner started it.
M.teardown = { "block", "await_setup", "stop_renewal", "delete", "stop_sandboxd" }
M.delete_not_found_is_gone = true

return M
