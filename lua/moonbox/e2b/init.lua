-- moonbox.e2b — the "e2b" plugin: the sandbox owner every provider of the E2B family injects.
--
-- Config: apiKey (else E2B_API_KEY), cwd (absolute, default: the composition's lifecycle
-- policy, default_cwd), timeoutMs (the lease, default: its default_timeout_ms), sandboxId (connect to an existing
-- sandbox instead of creating one), template (or a snapshot), metadata, envVars,
-- allowInternetAccess (must agree with the network policy's `internet` when both are set: the
-- policy's allow_out/deny_out and rules go into the create request too), allowPublicTraffic
-- (false: the sandbox's ports answer only requests carrying its e2b-traffic-access-token, which
-- ctx.e2b:host(port) returns as a header), autoPause, secure (the create options, as the SDK
-- names them), envdCodec
-- ("proto" | "json": how envd is spoken to; MOONBOX_ENVD_CODEC). Endpoints come from E2B_API_URL /
-- E2B_SANDBOX_URL / E2B_DOMAIN; with none of them set, the owner starts a local sandboxd and
-- stops it at teardown (moonbox.e2b.launcher). The pieces: owner.lua (lifecycle),
-- sandbox.lua (the handle providers use), envd.lua and api.lua (the wire), endpoints.lua,
-- launcher.lua.
local S = require "moonbox.policy.schema"
local owner = require "moonbox.e2b.owner"
local endpoints = require "moonbox.e2b.endpoints"

local M = { name = "e2b", provides = "e2b", inject = {} }
M.client = require("moonbox.e2b.client").new    -- the API on any sandbox, without an owner
local policy_set = require "moonbox.policies"
local net = require "moonbox.policy.network"
local R = require "moonbox.policy.rules"
local binaries = require "moonbox.binaries"

-- Defaults come from the composition's merged lifecycle policy (compose passes its set).
local function lifecycle_default(field)
  return function(policies)
    return (policies or policy_set.defaults()).lifecycle[field]
  end
end

M.schema = {
  apiKey = { type = "string", secret = true,
    check = function(v) if v == "" then return "must be non-empty (or leave it unset to use E2B_API_KEY)" end end },
  cwd = { type = "string", default = lifecycle_default("default_cwd"),
    check = function(v)
      if v:sub(1, 1) ~= "/" then return "must be an absolute Linux path: " .. v end
      if v:find("\0", 1, true) then return "must not contain NUL" end
    end },
  timeoutMs = { type = "number", default = lifecycle_default("default_timeout_ms"),
    check = function(v)
      if v ~= v or v <= 0 or v == math.huge then return "must be a positive finite number" end
    end },
  sandboxId = { type = "string", check = function(v) if not v:match("^[%w]+$") then return "must be alphanumeric" end end },
  template = { type = "string", check = function(v) if v == "" then return "must be a template or snapshot name" end end },
  metadata = { type = "table", check = S.string_map },
  envVars = { type = "table", check = S.string_map },
  allowInternetAccess = { type = "boolean" },
  allowPublicTraffic = { type = "boolean" },
  autoPause = { type = "boolean" },
  secure = { type = "boolean" },
  envdCodec = { type = "string", check = function(v)
    if v ~= "proto" and v ~= "json" then return "must be \"proto\" or \"json\", got " .. v end
  end },
  caFile = { type = "string", check = function(v) if v == "" then return "must be a path to a PEM CA bundle" end end },
  connectTo = { type = "table", check = function(v)
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    if n ~= #v then return "must be a list of HOST:PORT:TO-HOST:TO-PORT strings" end
    for i, r in ipairs(v) do
      local bad = endpoints.check_connect_to(r)
      if bad then return ("[%d]: %s"):format(i, bad) end
    end
  end },
}


-- Checked by compose.load with the composition's policies, before anything starts. The plugin's
-- allowInternetAccess and the network policy's `internet` must agree when both are set (a
-- policy left at its default yields to the plugin option). A sandbox the composition only
-- connects to (sandboxId) keeps the rules it was created with: a non-default policy is then
-- a warning. → nil | error message, warnings
function M.validate(config, policies, where)
  local p = policies and policies.network
  if not p then return nil end
  local o = policies.origins and policies.origins.network and policies.origins.network.internet
  if config.allowInternetAccess ~= nil and o and o.kind ~= "default" and config.allowInternetAccess ~= p.internet then
    return ("allowInternetAccess = %s disagrees with the network policy's internet = %s (%s): set it in one place")
      :format(tostring(config.allowInternetAccess), tostring(p.internet), policy_set.origin_text(o))
  end
  -- the policy's check saw its own `internet`; the plugin's allowInternetAccess = false closes it here
  if config.allowInternetAccess == false and not config.sandboxId then
    local u = R.unused(p.rules, false, p.allow_out, p.deny_out)[1]
    if u then
      u.why = "allowInternetAccess is false"
      return ("the network policy's rules[%q] (%s) is %s"):format(u.key, tostring(p.rule_where(u.key)), net.unused_text(u))
    end
  end
  if config.sandboxId and not p.is_default() then
    return nil, { ("%s: the network policy (%s) is not applied to sandbox %s, which this composition connects to "
      .. "(sandboxId): it keeps the rules it was created with; ctx.e2b:updateNetwork(ctx.policies.network.options()) "
      .. "applies it"):format(where or "plugin \"e2b\"", p.summary(), config.sandboxId) }
  end
end

M.new = owner.new
M.network_request = owner.network_request
M.Owner = owner.Owner
M.WRAPPER_DIR = owner.WRAPPER_DIR
M.PREPARE, M.parse_prepare = owner.PREPARE, owner.parse_prepare
M.endpoints, M.sandbox_url = endpoints.resolve, endpoints.sandbox_url
M.find_binary, M.moonbox_exe = binaries.find, binaries.moonbox_exe

return M
