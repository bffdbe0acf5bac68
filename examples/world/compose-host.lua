-- The execution world on this host: the host providers (the host kernel decides permissions).
plugin "fs-local" { cwd = os.getenv("TMPDIR") or "/tmp" }
plugin "subprocess-local" {}

-- The consumers: the same lines as in compose-sandbox.lua.
plugin "bash" {}
plugin "terminal" {}
plugin "lsp" { args = { "--log=error" } }
-- Workspace sync (push a host directory into the world, pull its changes back).
plugin "workspace" { stateDir = (os.getenv("TMPDIR") or "/tmp") .. "/moonbox-world-sync" }
