-- The sandbox may reach allowed.test and nothing else; its requests to allowed.test carry the
-- host's token, put in by the egress proxy as they leave: the token never enters the sandbox.
allow_out = { "allowed.test" }
deny_out = { "0.0.0.0/0" }
rules = {
  ["allowed.test"] = { headers = { Authorization = { fromEnv = "DEMO_TOKEN", format = "Bearer %s" } } },
}
