-- spec/edge/edge_spec.lua runs run.lua in this composition with only E2B_API_KEY, E2B_DOMAIN,
-- MOONBOX_CA_FILE and MOONBOX_CONNECT_TO set (the E2B cloud configuration, pointed at the test's
-- sandboxd in edge mode).
plugin "subprocess" {}
plugin "fs" {}
plugin "e2b" { cwd = "/home/user/workspace", timeoutMs = 120000 }
