-- The run tests/secrets/secrets.test.mjs watches: the embedded sandboxd (no E2B_* set), a
-- sandbox with internet access (so pasta runs), the fs and subprocess seams.
plugin "subprocess" {}
plugin "fs" {}
plugin "e2b" { cwd = "/home/user/workspace", timeoutMs = 300000, allowInternetAccess = true }
