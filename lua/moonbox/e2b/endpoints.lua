-- moonbox.e2b.endpoints — where the E2B endpoints are (this build's programs are found by
-- moonbox.binaries). Configuration follows E2B's own variables: E2B_API_KEY,
-- E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN. With none of them (and no apiKey), moonbox starts
-- its own sandboxd (local_sandboxd = true). MOONBOX_CA_FILE and MOONBOX_CONNECT_TO (or the
-- plugin's caFile / connectTo) say how to reach them; MOONBOX_ENVD_CODEC (envdCodec) how to
-- speak to envd ("proto", the default, or "json").
local M = {}

M.ENVD_PORT = 49983
-- E2B's shared domains route envd through one host with E2b-Sandbox-Id headers.
M.SHARED_SANDBOX_DOMAINS = { ["e2b.app"] = true, ["e2b.dev"] = true, ["e2b.pro"] = true, ["e2b-staging.dev"] = true }

-- getenv(name), with an empty value counting as unset.
local function env_value(getenv, name)
  local v = getenv(name)
  if v == nil or v == "" then return nil end
  return v
end

-- config.apiKey and the environment → { api_key, api_url, sandbox_url, domain, local_sandboxd }.
-- `getenv` (default os.getenv) lets an embedder or a spec supply the environment.
function M.resolve(config, getenv)
  getenv = getenv or os.getenv
  local function get(name) return env_value(getenv, name) end
  local e = {
    api_key = config.apiKey or get("E2B_API_KEY"),
    api_url = get("E2B_API_URL"),
    sandbox_url = get("E2B_SANDBOX_URL"),
    domain = get("E2B_DOMAIN"),
  }
  e.local_sandboxd = not (e.api_key or e.api_url or e.sandbox_url or e.domain)
  e.api_url = e.api_url or ("https://api." .. (e.domain or "e2b.app"))
  -- How to reach the endpoints: a CA bundle to trust (a self-hosted E2B with its own CA) and
  -- connect-to rules (split DNS: `::10.0.0.5:443` sends every host to the cluster's edge while
  -- TLS and Host still name the real host). Config wins over MOONBOX_CA_FILE / MOONBOX_CONNECT_TO.
  local ct = config.connectTo
  if ct == nil and get("MOONBOX_CONNECT_TO") then
    ct = {}
    for item in get("MOONBOX_CONNECT_TO"):gmatch("[^,%s]+") do ct[#ct + 1] = item end
  end
  e.transport = { ca_file = config.caFile or get("MOONBOX_CA_FILE"), connect_to = ct }
  -- envd's codec: binary protobuf unless told otherwise (a server that refuses it turns the
  -- client to JSON by itself).
  e.codec = config.envdCodec or get("MOONBOX_ENVD_CODEC") or "proto"
  if e.codec ~= "proto" and e.codec ~= "json" then
    error(("MOONBOX_ENVD_CODEC must be \"proto\" or \"json\", got %q"):format(e.codec), 0)
  end
  return e
end

-- Points resolved endpoints `e` (nothing configured) at another sandboxd's `other` (the
-- background sandboxd's): its key and URLs, plain loopback HTTP (no CA, no connect-to rules).
function M.use(e, other)
  e.api_key, e.api_url, e.sandbox_url = other.api_key, other.api_url, other.sandbox_url
  e.transport = { }
  e.local_sandboxd, e.background = false, true
  return e
end

-- A connect-to rule (HOST:PORT:TO-HOST:TO-PORT, libcurl's CONNECT_TO) → nil | what is wrong.
function M.check_connect_to(v)
  if type(v) ~= "string" or select(2, v:gsub(":", "")) < 3 or v:find("[%s,]") then
    return ("%s is not HOST:PORT:TO-HOST:TO-PORT (an empty field matches any)"):format(tostring(v))
  end
end

-- envd's base URL for a sandbox (reference §1.2).
function M.sandbox_url(ep, id, domain)
  if ep.sandbox_url then return ep.sandbox_url end
  local d = domain or ep.domain or "e2b.app"
  if M.SHARED_SANDBOX_DOMAINS[d] then return "https://sandbox." .. d end
  return ("https://%d-%s.%s"):format(M.ENVD_PORT, id, d)
end


return M
