-- policies/lifecycle.lua — the sandbox lease, its renewal, setup rollback and teardown order
-- (the shipped defaults; a policy file of your own sets any subset of these fields).
return {
  -- The lease asked for at create/connect when the e2b plugin sets no timeoutMs (E2B counts
  -- whole seconds), and the working directory when it sets no cwd.
  default_timeout_ms = 300000,
  default_cwd = "/home/user/workspace",

  -- The private runtime root lives outside cwd so it never shows up in the user's listings;
  -- mbwrap's directory is root-owned. "%s" is replaced by a random id per sandbox owner. Both
  -- are always verified to be real directories before use; that part is not a policy.
  runtime_root = "/tmp/.moonbox-%s",
  wrapper_dir = "/opt/.moonbox-%s",

  -- Lease renewal: while the owner is open, renew once less than this fraction of the lease is
  -- left. `renew = false` lets the sandbox expire after its lease like E2B's default.
  renew = true,
  renew_below_fraction = 0.5,
  min_renew_interval_ms = 1000,

  -- Setup failure: delete the half-made sandbox this many times (errors from the delete are
  -- dropped) and report the original setup error.
  setup_rollback_deletes = 1,

  -- Teardown: what the owner does, in this order, when the composition is disposed.
  -- "block"  → new acquisitions fail with E2B_DISPOSING;
  -- "await_setup" → wait for creation/setup to settle (a failed setup needs no delete);
  -- "stop_renewal" → stop the lease renewer;
  -- "cleanup" → in a sandbox it connected to (sandboxId) and does not delete, remove what it
  --   made there: its runtime root and its mbwrap directory;
  -- "delete" → DELETE the sandbox; "not found" counts as gone when delete_not_found_is_gone;
  -- "stop_sandboxd" → stop the local sandboxd if this owner started it.
  teardown = { "block", "await_setup", "stop_renewal", "cleanup", "delete", "stop_sandboxd" },
  delete_not_found_is_gone = true,
}
