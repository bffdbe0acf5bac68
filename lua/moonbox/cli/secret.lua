-- moonbox.cli.secret — `moonbox secret set|list|info|delete`: the secret store (E2B's /secrets)
-- from the shell, against the endpoint E2B's variables name (E2B_API_KEY, E2B_DOMAIN, or
-- E2B_API_URL + E2B_SANDBOX_URL for a sandboxd of your own), else the per-user background
-- sandboxd (moonbox sandboxd: its store outlives its restarts; the embedded sandboxd of `moonbox
-- run` lives for one run, and its store with it). A value is read from stdin or a file, never from the command line
-- (which every local user can read), and is never printed: no answer of the store carries one.
-- Exit status: 0 done, 1 the store refused (one line naming the secret), 2 a usage mistake.
local R = require "moonbox.policy.rules"
local mb = require "moonbox"
local net = require "moonbox.cli.network"
local sandbox_cli = require "moonbox.cli.sandbox"
local core = require "moonbox.core"
local background = require "moonbox.e2b.background"
local client_mod = require "moonbox.e2b.client"
local errors = require "moonbox.errors"

local M = {}

M.COMMAND_HELP = {
  { path = "secret", about = "Keep values in the endpoint's secret store for the network policy's rules "
    .. "(a value is never taken from the command line, and never shown).", commands = { "set", "list", "info", "delete" } },
  { path = "secret set", usage = { "moonbox secret set NAME [--from-file F | --prompt] [--metadata K=V]... [--json]   (the value on stdin)" },
    about = "Store a secret (a new version when NAME exists); the value comes from stdin, a file or the terminal.",
    args = { { "NAME", "the secret's name (lower-case letters, digits, '-' and '_')" } },
    options = { { "--from-file F", "read the value from file F" }, { "--prompt", "type the value on the terminal (not echoed)" },
      { "--metadata K=V", "a metadata pair (repeatable)" }, { "--json", "print the store's answer as JSON" } } },
  { path = "secret list", usage = { "moonbox secret list [--json]" }, about = "List the secrets (names, versions, metadata; never values).",
    options = { { "--json", "print JSON" } } },
  { path = "secret info", usage = { "moonbox secret info NAME [--json]" }, about = "Print one secret's version, dates and metadata.",
    args = { { "NAME", "the secret" } }, options = { { "--json", "print JSON" } } },
  { path = "secret delete", usage = { "moonbox secret delete NAME..." }, about = "Delete secrets.",
    args = { { "NAME...", "the secrets" } } },
}

local function line(s) io.stdout:write(s, "\n") end

local function name_arg(cli, name, cmd)
  if not name then cli.usage_error("secret %s: which secret? (moonbox secret %s NAME)", cmd, cmd) end
  local bad = R.secret_name_error(name)
  if bad then cli.usage_error("secret %s: %s", cmd, bad) end
  return name
end

-- A value as read: one trailing line break dropped (`echo "$TOKEN" |`), then checked as a header
-- value (never quoted). → value | nil, err
local function finish(cli, raw, from)
  if raw == nil then return nil, errors.new("MB_NOT_FOUND", ("cannot read the value from %s"):format(from)) end
  local v = raw:gsub("\r?\n$", "", 1)
  local why = client_mod.secret_value_error(v)
  if why then cli.usage_error("secret set: %s (from %s)", why, from) end
  return v
end

-- The value: --from-file F, the terminal with --prompt (not echoed), or stdin (a pipe or a file;
-- a terminal without --prompt is refused: what is typed there would be echoed).
local function read_value(cli, opts)
  local max = client_mod.MAX_SECRET
  if opts["--from-file"] then
    local path = opts["--from-file"]
    local f, err = io.open(path, "rb")
    if not f then
      return nil, errors.new("MB_NOT_FOUND", ("--from-file %s: %s"):format(path, (tostring(err):gsub("^[^:]*: ", ""))))
    end
    local raw = f:read(max + 3)
    local more = raw and f:read(0)
    f:close()
    if more then cli.usage_error("secret set: the value is longer than %d bytes (from %s)", max, path) end
    return finish(cli, raw or "", path)
  end
  if opts["--prompt"] then
    if not core.isatty(0) then cli.usage_error("secret set: --prompt reads from a terminal, and stdin is not one") end
    os.execute("stty -echo 2>/dev/null")                -- before the prompt: nothing typed after it is echoed
    io.stderr:write("value (not echoed): ")
    io.stderr:flush()
    local ok, raw = pcall(io.read, "L")
    os.execute("stty echo 2>/dev/null")
    io.stderr:write("\n")
    if not ok then error(raw, 0) end
    return finish(cli, raw or "", "the terminal")
  end
  if core.isatty(0) then
    cli.usage_error("secret set: stdin is a terminal: pipe the value in, give --from-file F, or --prompt to type it unechoed")
  end
  local raw = io.stdin:read(max + 3)
  if raw and io.stdin:read(0) then cli.usage_error("secret set: the value is longer than %d bytes (from stdin)", max) end
  return finish(cli, raw or "", "stdin")
end

local metadata_text = sandbox_cli.metadata_text

local function encode(v) return net.encode(v) end

local commands = {}

-- Options anywhere among the arguments. → opts, positionals
local function parse_all(cli, argv, i, spec, cmd) return sandbox_cli.parse_all(cli, argv, i, spec, cmd) end

function commands.set(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--from-file"] = "value", ["--prompt"] = "flag", ["--metadata"] = "list",
    ["--json"] = "flag" }, "secret set")
  local name = name_arg(cli, args[1], "set")
  if args[2] then
    cli.usage_error("secret set: a value is never taken from the command line (every local user can read it): "
      .. "pipe it in, or give --from-file F or --prompt")
  end
  if opts["--from-file"] and opts["--prompt"] then cli.usage_error("secret set: give --from-file or --prompt, not both") end
  local md
  for _, kv in ipairs(opts["--metadata"] or {}) do
    local k, v = kv:match("^([^=]+)=(.*)$")
    if not k then cli.usage_error("secret set: --metadata %s: expected KEY=VALUE", kv) end
    md = md or {}
    md[k] = v
  end
  local value, verr = read_value(cli, opts)
  if not value then return function() return nil, verr end end
  return function(c)
    local s, how = c:setSecret(name, value, { metadata = md })
    value = nil
    if not s then return nil, how end
    if opts["--json"] then
      s.action = how
      line(encode(s))
    else
      line(("%s secret %s (version %s)"):format(how, s.name, tostring(s.version)))
    end
    return 0
  end
end

function commands.list(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--json"] = "flag" }, "secret list")
  if args[1] then cli.usage_error("secret list: unexpected argument %s", args[1]) end
  return function(c)
    local all, err = c:listAllSecrets()
    if not all then return nil, err end
    if opts["--json"] then line(#all == 0 and "[]" or encode(all)) return 0 end
    local row = cli.rows()
    row(("%-32s %-8s %-26s %s"):format("NAME", "VERSION", "UPDATED", "METADATA"))
    for _, s in ipairs(all) do
      row(("%-32s %-8s %-26s %s"):format(s.name, tostring(s.version or ""), tostring(s.updatedAt or ""), metadata_text(s.metadata)))
    end
    return 0
  end
end

function commands.info(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--json"] = "flag" }, "secret info")
  local name = name_arg(cli, args[1], "info")
  if args[2] then cli.usage_error("secret info: unexpected argument %s", args[2]) end
  return function(c)
    local s, err = c:secretInfo(name)
    if not s then return nil, err end
    if opts["--json"] then line(encode(s)) return 0 end
    line(("%s\nversion %s, created %s, updated %s%s"):format(s.name, tostring(s.version), tostring(s.createdAt),
      tostring(s.updatedAt), next(s.metadata) and (", metadata " .. metadata_text(s.metadata)) or ""))
    return 0
  end
end

function commands.delete(cli, argv, i)
  local _, args = parse_all(cli, argv, i, {}, "secret delete")
  if not args[1] then cli.usage_error("secret delete: which secret? (moonbox secret delete NAME...)") end
  local names = {}
  for _, a in ipairs(args) do names[#names + 1] = name_arg(cli, a, "delete") end
  return function(c)
    return cli.delete_each(names, function(name) return c:deleteSecret(name) end, "secret",
      function(name) return "deleted " .. name end)
  end
end

-- argv[i] is the subcommand. → exit status | nil, err
function M.main(cli, argv, i)
  local sub = cli.subcommand("secret", argv, i, M.COMMAND_HELP[1].commands)
  local cmd = commands[sub]
  local act = cmd(cli, argv, i + 1)              -- usage is checked (and the value read) before any request
  local res = table.pack(mb.run(function()
    -- E2B's variables, else the background sandboxd (started now when it does not run)
    local ep, eerr = background.ensure_endpoints()
    if not ep then
      if eerr.code == "E2B_CONFIG" then
        eerr.message = eerr.message .. "; the embedded sandboxd of `moonbox run` lives for one run and keeps no secrets across runs"
      end
      return nil, eerr
    end
    local c, cerr = client_mod.new{ endpoints = ep }
    if not c then return nil, cerr end
    return act(c)
  end))
  return table.unpack(res, 1, res.n)
end

return M
