-- bench/sync.sh's composition: the sandbox owner (on the sandboxd the bench starts, through
-- E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY), the filesystem seam, workspace sync (its records
-- in the bench's scratch directory).
plugin "e2b" { cwd = "/home/user/workspace", timeoutMs = 900000 }
plugin "fs" {}
plugin "subprocess" {}
plugin "workspace" { stateDir = assert(os.getenv("MB_BENCH_STATE"), "MB_BENCH_STATE") }
