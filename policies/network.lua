-- policies/network.lua — where a sandbox may connect (the shipped defaults: anywhere public).
--
-- The `e2b` plugin sends these as E2B's create options (`allow_internet_access`,
-- `network.allowOut`, `network.denyOut`); sandboxd (or E2B) enforces them outside the sandbox,
-- where root inside it cannot touch them. Entries are IPv4/IPv6 addresses, CIDRs, host names and
-- `*.example.com` wildcards (subdomains at any depth, never the apex). An allow_out entry wins
-- over a deny_out entry; "0.0.0.0/0" is all traffic (IPv6 too). A host name decides TCP 80 (the
-- Host header) and 443 (TLS SNI) only: other ports and UDP are decided by address, so towards a
-- names-only allow list they are denied once deny_out holds "0.0.0.0/0".
--
-- sandboxd's safe defaults hold whatever this file says: loopback, special and the host's own
-- addresses are never reached; link-local (169.254.0.0/16, fe80::/10: cloud instance metadata)
-- only when sandboxd runs with --egress-unblock link-local; private and shared ranges (10/8,
-- 172.16/12, 192.168/16, 100.64/10, fc00::/7) only when allow_out names an address or CIDR
-- inside them (not 0.0.0.0/0, not a name) or sandboxd runs with --egress-unblock private.
--
-- On the host providers (fs-local, subprocess-local) nothing of this is enforced: moonbox warns.
-- A policy file of your own sets any subset of these fields; it is merged over this one and
-- each entry is checked when it is loaded. Try it without a sandbox:
--   moonbox policy network --policy network=./my-net.lua --check https://pypi.org --check 10.0.0.5:22
return {
  -- Internet access (E2B's allow_internet_access). false: every destination is denied but what
  -- allow_out names (as E2B does: allow_out still holds).
  internet = true,

  -- Destinations always allowed (E2B's allowOut): addresses, CIDRs, host names, *.wildcards.
  allow_out = {},

  -- Destinations denied unless allow_out allows them (E2B's denyOut): addresses and CIDRs only;
  -- "0.0.0.0/0" denies everything allow_out does not name.
  deny_out = {},

  -- Request headers per host (E2B's network.rules), set by sandboxd's (or E2B's) egress proxy on
  -- the way out, on HTTP and HTTPS (it terminates TLS for these hosts only), so that a sandbox
  -- uses a credential it never sees. A host is a name or a *.wildcard (the exact host first, else
  -- the longest matching wildcard). Each header takes its value from exactly one of
  --   secret = "NAME"    the secret store (`moonbox secret set NAME`, value from stdin or a file)
  --   fromEnv = "VAR"    a host variable, read when the sandbox starts and sent as a secret for
  --                      that sandbox only (deleted with it); an unset VAR stops the start
  -- and `format` puts it in place ("Bearer %s"; default "%s"). No literal values. A rule does not
  -- allow its host: when internet is off or deny_out holds 0.0.0.0/0, allow_out must name it.
  --   rules = {
  --     ["api.github.com"] = { headers = { Authorization = { secret = "github-token", format = "Bearer %s" } } },
  --     ["*.npmjs.org"] = { headers = { Authorization = { fromEnv = "NPM_TOKEN", format = "Bearer %s" } } },
  --   }
  rules = {},
}
