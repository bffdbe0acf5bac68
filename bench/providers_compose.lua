-- bench/providers.sh's composition: the sandbox owner (on the sandboxd the bench starts, through
-- E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY), the filesystem seam and the subprocess seam.
plugin "e2b" { cwd = "/home/user/workspace", timeoutMs = 600000 }
plugin "fs" {}
plugin "subprocess" {}
