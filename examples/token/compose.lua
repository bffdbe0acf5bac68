-- A sandbox that uses a host token it never sees (network.lua), and the bash tool in it.
policies { network = "network.lua" }
plugin "e2b" { cwd = "/home/user" }
plugin "subprocess" {}
plugin "bash" { cwd = "/home/user" }
