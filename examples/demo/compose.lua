-- The demo composition: one sandbox (the local sandboxd unless E2B_API_KEY / E2B_API_URL point
-- elsewhere), the filesystem seam and the subprocess seam. The order here does not matter.
plugin "subprocess" {}
plugin "fs" {}
plugin "e2b" { cwd = "/home/user/workspace", timeoutMs = 300000 }
