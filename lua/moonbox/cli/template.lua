-- moonbox.cli.template — `moonbox template build|list|delete`: templates described in Lua
-- (moonbox.template) built by E2B's template API (moonbox.e2b.template), against the endpoint
-- E2B's variables name (E2B_API_KEY, E2B_DOMAIN, or E2B_API_URL + E2B_SANDBOX_URL), else the
-- per-user background sandboxd, as `moonbox sandbox` does.
-- `build` shows the build's log as it comes: on a terminal, under a status line (a spinner, the
-- step running, its time) redrawn in place; otherwise one plain line per log entry.
-- Exit status: 0 built (listed, deleted), 1 refused or failed (one line: the failing step, its
-- file:line and its reason), 2 a usage mistake.
local mb = require "moonbox"
local net = require "moonbox.cli.network"
local sandbox_cli = require "moonbox.cli.sandbox"
local core = require "moonbox.core"
local errors = require "moonbox.errors"
local T = require "moonbox.template"
local text = require "moonbox.text"

local M = {}

M.COMMAND_HELP = {
  { path = "template", about = "Build sandbox templates described in Lua, list and delete templates.",
    commands = { "build", "list", "delete" },
    notes = "A template file returns template { from = \"base\", steps = { run \"...\", copy { \"src\", \"/dst\" }, "
      .. "env { K = \"v\" }, workdir \"/app\", user \"user\" }, start = { \"cmd\", ready = port(8000) } } "
      .. "(docs/reference/template.md)." },
  { path = "template build", usage = { "moonbox template build FILE.lua --name NAME[:TAG] [--tag TAG]... [--skip-cache]" },
    about = "Build the template FILE.lua describes as NAME, showing its log as it runs.",
    args = { { "FILE.lua", "the template file (COPY sources are relative to its directory unless it names a context)" } },
    options = { { "--name NAME[:TAG]", "the template's name (Sandbox.create(NAME), the e2b plugin's template = NAME), a tag of the build after ':'" },
      { "--tag TAG", "a tag of the build (repeatable; Sandbox.create(NAME:TAG)); with none the build is NAME's default" },
      { "--skip-cache", "build every step again (E2B's skipCache)" } } },
  { path = "template list", usage = { "moonbox template list [--json]" },
    about = "List the templates: base, built templates and snapshots.", options = { { "--json", "print JSON" } } },
  { path = "template delete", usage = { "moonbox template delete NAME|ID..." }, about = "Delete templates.",
    args = { { "NAME|ID...", "a template's name or id" } } },
}

local function line(s) io.stdout:write(s, "\n") end
local function encode(v) return net.encode(v) end
local parse_all = sandbox_cli.parse_all

local SPIN = { "|", "/", "-", "\\" }

-- What the build's log looks like: on a terminal a status line under the log, redrawn in place;
-- otherwise the log's lines only.
local function printer(desc, tty, width)
  local p = { status = "requesting the build", since = mb.now(), frame = 0 }
  local n = #desc.steps
  local function draw()
    if not tty then return end
    p.frame = p.frame % #SPIN + 1
    local s = ("%s %s  %.1fs"):format(SPIN[p.frame], p.status, (mb.now() - p.since) / 1000)
    io.stdout:write("\r\27[K", text.fit(s, width and width - 1 or nil))
    io.stdout:flush()
  end
  function p.entry(e)
    local status
    if math.type(e.step) == "integer" and desc.steps[e.step] then
      status = ("[%d/%d] %s"):format(e.step, n, T.describe_step(desc.steps[e.step]))
    elseif e.step == "base" then status = "starting from " .. (desc.image or desc.from)
    elseif e.step == "finalize" then status = desc.start and "start command, ready check, capture" or "capture"
    elseif e.step == nil then status = e.message end
    if status and status ~= p.status then p.status, p.since = status, mb.now() end
    local msg = e.message:gsub("[\r\n]+$", "")
    if e.level == "error" or e.level == "warn" then msg = e.level .. ": " .. msg end
    if tty then io.stdout:write("\r\27[K") end
    io.stdout:write(msg, "\n")
    draw()
  end
  p.draw = draw
  function p.finish() if tty then io.stdout:write("\r\27[K") io.stdout:flush() end end
  return p
end

local commands = {}

function commands.build(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--name"] = "value", ["--tag"] = "list", ["--skip-cache"] = "flag" }, "template build")
  local file = args[1]
  if not file then cli.usage_error("template build: which file? (moonbox template build FILE.lua --name NAME)") end
  if args[2] then cli.usage_error("template build: unexpected argument %s", args[2]) end
  local name = opts["--name"]
  if not name then cli.usage_error("template build: --name NAME is required (the name sandboxes are created from)") end
  if name == "" then cli.usage_error("template build: --name must not be empty") end
  for _, t in ipairs(opts["--tag"] or {}) do
    if t == "" then cli.usage_error("template build: --tag must not be empty") end
  end
  local f = io.open(file, "rb")
  if not f then return nil, errors.new("MB_NOT_FOUND", ("template file %s: no such file"):format(file)) end
  f:close()
  local desc, derr = T.load(file)                 -- checked before any request
  if not desc then return nil, derr end
  return function(c)
    local tty = core.isatty(1)
    local pr = printer(desc, tty, cli.width())
    local done = false
    local ticker = tty and mb.spawn(function()
      while not done do
        pr.draw()
        if not mb.sleep(100) then return end
      end
    end)
    local t0 = mb.now()
    local r, err = c:buildTemplate(desc, { name = name, tags = opts["--tag"], skipCache = opts["--skip-cache"] or nil, onLogs = pr.entry })
    done = true
    if ticker then ticker:cancel() end
    pr.finish()
    if not r then return nil, err end
    local tagged = r.tags and #r.tags > 0 and not (#r.tags == 1 and r.tags[1] == "default") and (", tagged " .. table.concat(r.tags, ", ")) or ""
    line(("built template %s (%s%s) in %.1f s"):format(r.name, r.templateId, tagged, (mb.now() - t0) / 1000))
    return 0
  end
end

function commands.list(cli, argv, i)
  local opts, args = parse_all(cli, argv, i, { ["--json"] = "flag" }, "template list")
  if args[1] then cli.usage_error("template list: unexpected argument %s", args[1]) end
  return function(c)
    local all, err = c:templates()
    if not all then return nil, err end
    if opts["--json"] then line(#all == 0 and "[]" or encode(all)) return 0 end
    local row = cli.rows()
    local fmt = "%-22s %-24s %-9s %-4s %-8s %s"
    row(fmt:format("TEMPLATE ID", "NAMES", "STATUS", "CPU", "MEMORY", "CREATED"))
    for _, t in ipairs(all) do
      row(fmt:format(t.templateId, table.concat(t.names, ", "), tostring(t.buildStatus or ""), tostring(t.cpuCount or ""),
        t.memoryMB and (t.memoryMB .. " MB") or "", tostring(t.createdAt or "")))
    end
    return 0
  end
end

function commands.delete(cli, argv, i)
  local _, args = parse_all(cli, argv, i, {}, "template delete")
  if not args[1] then cli.usage_error("template delete: which template? (moonbox template delete NAME|ID...)") end
  for _, a in ipairs(args) do if a == "" then cli.usage_error("template delete: a template name must not be empty") end end
  return function(c)
    return cli.delete_each(args, function(ref) return c:deleteTemplate(ref) end, "template",
      function(ref) return "deleted template " .. ref end)
  end
end

-- argv[i] is the subcommand. → exit status | nil, err
function M.main(cli, argv, i)
  local sub = cli.subcommand("template", argv, i, M.COMMAND_HELP[1].commands)
  local act, aerr = commands[sub](cli, argv, i + 1)   -- usage (and the template file) checked before any request
  if not act then return nil, aerr end
  local res = sandbox_cli.with_client(act)
  return table.unpack(res, 1, res.n)
end

return M
