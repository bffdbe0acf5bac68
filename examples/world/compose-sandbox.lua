-- The execution world in a sandbox: the E2B providers (the local sandboxd unless E2B_API_KEY /
-- E2B_API_URL point elsewhere).
plugin "e2b" { cwd = "/home/user/workspace" }
plugin "fs" {}
plugin "subprocess" {}

-- The consumers: the same lines as in compose-host.lua.
plugin "bash" {}
plugin "terminal" {}
plugin "lsp" { args = { "--log=error" } }
-- Workspace sync (push a host directory into the world, pull its changes back).
plugin "workspace" { stateDir = (os.getenv("TMPDIR") or "/tmp") .. "/moonbox-world-sync" }
