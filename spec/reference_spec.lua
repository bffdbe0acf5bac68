-- The reference (docs/reference/*.md) against the code: every public method of each surface,
-- every option field the code's strict lists accept, every error code the surface's sources
-- construct and every plugin config field is documented — and nothing the code no longer has.
--
-- The format parsed (docs/reference/README.md says it too):
--   * a function: a level-3 heading whose text starts with its qualified name, the receiver as
--     the doc names it: `### fs:writeText(target, content, expected)`, `### mb.run(fn, ...)`;
--     headings without a `.` or `:` in their first word are prose;
--   * its options: inside its section (up to the next heading of level 1-3), a table whose
--     first header cell is `option`; each row's first cell is the field name in backticks;
--   * error codes: any table whose first header cell is `code`; first cell `CODE` in backticks
--     (only what this surface's own sources construct; codes passed through from a lower layer
--     are named in prose);
--   * plugins.md: `## plugin "name"`, then a table `| field | type | default | meaning |`; the
--     default cell is `lua expression` in backticks (compared with the schema's), — (none), or
--     prose for a default computed at load time (a function in the schema).
-- Runs without a sandbox: it loads modules and reads files.
local DOCS = "docs/reference/"

-- Fails with every problem, one per line (each says what to add or remove, and where).
local function none(problems)
  if #problems > 0 then error(#problems .. " problem(s):\n" .. table.concat(problems, "\n"), 2) end
end

local function read(path)
  local f = assert(io.open(path, "rb"), "cannot open " .. path)
  local s = f:read("a")
  f:close()
  return s
end

local function cells(line)
  local out = {}
  local body = line:match("^%s*|(.*)|%s*$")
  if not body then return nil end
  for c in (body .. "|"):gmatch("(.-)|") do out[#out + 1] = c:match("^%s*(.-)%s*$") end
  return out
end

local function ticked(cell) return cell and cell:match("^`([^`]+)`$") end

-- → { funcs = { [qualified] = { options = { name = true } | nil } }, order = { qualified... },
--     codes = { CODE = true }, plugins = { name = { field = { type, default } } } }
local function parse(path)
  local doc = { funcs = {}, order = {}, codes = {}, plugins = {} }
  local cur_func, cur_plugin
  local table_kind, header_seen
  for line in (read(path) .. "\n"):gmatch("(.-)\r?\n") do
    local level, title = line:match("^(#+)%s+(.-)%s*$")
    if level and #level <= 3 then
      cur_func, cur_plugin, table_kind = nil, nil, nil
      local q = title:match("^`?([%a_][%w_]*[.:][%w_.:]*)")
      if #level == 3 and q then
        q = q:gsub("[.:]$", "")
        assert(not doc.funcs[q], path .. ": " .. q .. " is documented twice")
        doc.funcs[q] = {}
        doc.order[#doc.order + 1] = q
        cur_func = q
      end
      local p = title:match('^plugin%s+"([^"]+)"')
      if #level == 2 and p then
        doc.plugins[p] = {}
        cur_plugin = p
      end
    else
      local c = cells(line)
      if not c then
        table_kind = nil
      elseif not table_kind then
        local head = c[1]:lower()
        table_kind = head == "option" and "option" or head == "code" and "code"
          or (head == "field" and cur_plugin) and "plugin" or "other"
        header_seen = false
      elseif not header_seen and line:match("^%s*|[%s:|-]+|%s*$") then
        header_seen = true
      else
        local name = ticked(c[1])
        if table_kind == "option" and cur_func then
          assert(name, path .. ": an option row without a `name`: " .. line)
          doc.funcs[cur_func].options = doc.funcs[cur_func].options or {}
          doc.funcs[cur_func].options[name] = true
        elseif table_kind == "code" then
          assert(name, path .. ": a code row without a `CODE`: " .. line)
          doc.codes[name] = true
        elseif table_kind == "plugin" then
          assert(name, path .. ": a plugin field row without a `name`: " .. line)
          doc.plugins[cur_plugin][name] = { type = c[2], default = c[3] }
        end
      end
    end
  end
  return doc
end

local function set(list, prefix)
  local s = {}
  for _, v in ipairs(list) do s[(prefix or "") .. (type(v) == "table" and v[1] or v)] = true end
  return s
end
local function union(...)
  local s = {}
  for _, t in ipairs({ ... }) do for k in pairs(t) do s[k] = true end end
  return s
end
local function sorted(s)
  local l = {}
  for k in pairs(s) do l[#l + 1] = k end
  table.sort(l)
  return l
end
-- a − b as a sorted list
local function minus(a, b)
  local l = {}
  for k in pairs(a) do if not b[k] then l[#l + 1] = k end end
  table.sort(l)
  return l
end

-- The error codes a source file constructs: the first argument, a string literal, of the
-- constructors moonbox uses (errors.new, its local aliases fs_err / lsp_err / fail, mb.error),
-- and in C every "SYNC_*" literal and MB_CODE_SYNC_* name (the sync core and mbwrap's sync
-- tools report through them).
local LUA_CTORS = { "errors%.new", "fs_err", "lsp_err", "fail", "mb%.error" }
local function codes_in(path)
  local src, out = read(path), {}
  if path:match("%.c$") then
    for c in src:gmatch('"(SYNC_[%u%d_]*[%u%d])"') do out[c] = true end
    for c in src:gmatch('MB_CODE_(SYNC_[%u%d_]*[%u%d])') do out[c] = true end   -- the named C codes
    return out
  end
  for _, ctor in ipairs(LUA_CTORS) do
    for c in src:gmatch("%f[%w_.]" .. ctor .. '%(%s*"([%u][%u%d_]*[%u%d])"') do out[c] = true end
  end
  return out
end

-- Public methods of a class table: functions whose name does not start with "_".
local function methods(class)
  local out = {}
  for k, v in pairs(class) do
    if type(k) == "string" and type(v) == "function" and not k:match("^_") then out[k] = true end
  end
  return out
end

local function fs_mod() return require "moonbox.fs.service" end
local function sp_spec() return require "moonbox.subprocess.spec" end

-- Each surface: its doc, the receivers its headings use → the class (or table) they stand for,
-- extra documented names the class cannot show, the option lists, the sources of its codes.
local SURFACES = {
  {
    doc = "fs.md",
    receivers = { ["fs:"] = function() return fs_mod().FS end,
      ["watcher:"] = function() return require("moonbox.fs.watch").Watcher end },
    options = function()
      local O = fs_mod().OPTIONS
      return {
        ["fs:resolve"] = set(O.resolve), ["fs:lstat"] = set(O.lstat),
        ["fs:writeText"] = set(O.expected, "expected."), ["fs:writeBytes"] = set(O.expected, "expected."),
        ["fs:editText"] = union(set(O.edit, "edit."), set(O.editExpected, "expected.")),
        ["fs:remove"] = set(O.remove), ["fs:mkdir"] = set(O.mkdir), ["fs:rename"] = set(O.rename), ["fs:watch"] = set(O.watch),
      }
    end,
    sources = { "lua/moonbox/fs/service.lua", "lua/moonbox/fs/paths.lua", "lua/moonbox/text.lua", "lua/moonbox/fs/watch.lua" },
    -- mapped from mbwrap's TOOL_FS_* (errors.FS) and the transport codes passed as they are
    extra_codes = function() return union(set(require("moonbox.errors").FS), set(fs_mod().TRANSPORT_CODES)) end,
  },
  {
    doc = "subprocess.md",
    receivers = {
      ["subprocess:"] = function() return require("moonbox.subprocess.service").SP end,
      ["handle:"] = function() return require("moonbox.subprocess.handle").Handle end,
      ["handle.stdin:"] = function() return require("moonbox.subprocess.handle").stdin_writer({}) end,
      ["collected:"] = function() return require("moonbox.subprocess.collector").Collector end,
      ["terminal:"] = function() return require("moonbox.subprocess.terminal").Term end,
    },
    -- added by plugin "subprocess-local" to its service object
    extra = { ["subprocess:scrubbedParentEnv"] = { file = "lua/moonbox/subprocess/local.lua",
      needle = "function sp.scrubbedParentEnv(" } },
    options = function()
      local S = sp_spec()
      return {
        ["subprocess:spawn"] = union(set(S.SPAWN_FIELDS), set(S.STDIO_FIELDS, "stdio."), set(S.OUTPUT_FIELDS, "stdio.stdout.")),
        ["subprocess:spawnTerminal"] = set(S.TERMINAL_FIELDS),
      }
    end,
    sources = { "lua/moonbox/subprocess/service.lua", "lua/moonbox/subprocess/handle.lua",
      "lua/moonbox/subprocess/terminal.lua", "lua/moonbox/subprocess/spec.lua", "lua/moonbox/subprocess/collector.lua" },
  },
  {
    doc = "bash.md",
    receivers = { ["bash:"] = function() return require("moonbox.consumers.bash").Bash end,
      ["job:"] = function() return require("moonbox.consumers.bash").Job end },
    options = function()
      local F = require("moonbox.consumers.bash").REQUEST_FIELDS
      return { ["bash:run"] = set(F.run), ["bash:start"] = set(F.start) }
    end,
    sources = { "lua/moonbox/consumers/bash.lua" },
  },
  {
    doc = "terminal.md",
    receivers = { ["terminal:"] = function() return require("moonbox.consumers.terminal").Terminal end,
      ["session:"] = function() return require("moonbox.consumers.terminal").Session end },
    options = function()
      local O = require("moonbox.consumers.terminal").OPTIONS
      return { ["terminal:open"] = set(O.open), ["session:send"] = set(O.send), ["session:interrupt"] = set(O.interrupt) }
    end,
    sources = { "lua/moonbox/consumers/terminal.lua" },
  },
  {
    doc = "lsp.md",
    receivers = { ["lsp:"] = function() return require("moonbox.consumers.lsp").LSP end,
      ["client:"] = function() return require("moonbox.consumers.lsp").Client end },
    options = function() return { ["lsp:start"] = set(require("moonbox.consumers.lsp").START_FIELDS) } end,
    sources = { "lua/moonbox/consumers/lsp.lua" },
  },
  {
    doc = "workspace.md",
    receivers = { ["workspace:"] = function() return require("moonbox.workspace").Workspace end },
    options = function()
      local O = set(require("moonbox.workspace").OPTIONS)
      return { ["workspace:push"] = O, ["workspace:pull"] = O, ["workspace:diff"] = O }
    end,
    sources = { "lua/moonbox/workspace/init.lua", "lua/moonbox/workspace/manifest.lua",
      "lua/moonbox/workspace/plan.lua", "core/lua_sync.c", "core/lua_sync_scan.c", "core/lua_sync_hash.c", "core/lua_sync_pack.c",
      "core/lua_sync_unpack.c", "core/lua_ignore.c", "core/sync_archive.c", "core/sync_tree.c",
      "core/sync_walk.c", "core/wrapper/sync.c" },
    -- constructed, then turned into SYNC_ABORTED before anything returns it
    internal = { MB_CANCELED = true },
  },
  {
    doc = "e2b.md",
    receivers = {
      ["e2b:"] = function() return require("moonbox.e2b.owner").Owner end,
      ["client:"] = function() return require("moonbox.e2b.client").Client end,
    },
    extra = { ["e2b.client"] = { file = "lua/moonbox/e2b/init.lua", needle = "M.client = require(\"moonbox.e2b.client\").new" } },
    options = function()
      local C = require "moonbox.e2b.client"
      return { ["e2b:updateNetwork"] = set(C.NETWORK_KEYS), ["client:updateNetwork"] = set(C.NETWORK_KEYS),
        ["client:create"] = set(C.CREATE_NETWORK_KEYS, "network."), ["client:logs"] = set(C.LOGS_FIELDS),
        ["client:buildTemplate"] = set(require("moonbox.e2b.template").BUILD_FIELDS) }
    end,
    -- client:create's other options are not a strict list: its table holds network.* and those
    partial_options = { ["client:create"] = true },
    sources = { "lua/moonbox/e2b/init.lua", "lua/moonbox/e2b/owner.lua", "lua/moonbox/e2b/client.lua",
      "lua/moonbox/e2b/api.lua", "lua/moonbox/e2b/launcher.lua", "lua/moonbox/world/e2b.lua", "lua/moonbox/e2b/template.lua" },
  },
  {
    doc = "template.md",
    receivers = { ["template."] = function() return require "moonbox.template" end },
    options = function()
      local T = require "moonbox.template"
      local step = {}
      for kind, f in pairs(T.STEP_FIELDS) do step["template." .. kind] = set(f) end
      step["template.template"] = union(set(T.FIELDS), set(T.START_FIELDS, "start."))
      return step
    end,
    sources = { "lua/moonbox/template.lua" },
  },
  {
    doc = "moonbox.md",
    receivers = {
      ["mb."] = function()
        local mb = require "moonbox"
        local t = {}
        for k, v in pairs(mb) do t[k] = v end
        for _, k in ipairs({ "http", "proc", "pstream" }) do t[k] = mb[k] end   -- loaded on first use
        local out = {}
        for k in pairs(t) do out[k] = function() end end          -- every key is API, tables too
        return out
      end,
      ["task:"] = function() return require("moonbox.sched").Task end,
      ["event:"] = function() return getmetatable(require("moonbox.events").event()).__index end,
      ["queue:"] = function() return getmetatable(require("moonbox.events").queue()).__index end,
      ["mb.http."] = function() return require "moonbox.http" end,
      ["stream:"] = function() return require("moonbox.http").Stream end,
      ["mb.proc."] = function() return require "moonbox.proc" end,
    },
    -- the http module's tables (OPTIONS, Stream) are not calls
    options = function()
      local O = set(require("moonbox.http").OPTIONS)
      return { ["mb.http.request"] = O, ["mb.http.stream"] = O }
    end,
    sources = { "lua/moonbox/sched.lua", "lua/moonbox/events.lua", "lua/moonbox/http.lua", "lua/moonbox/proc.lua" },
  },
}

-- "mb.proc." holds Process's methods as well: documented as process:…
SURFACES[#SURFACES].receivers["process:"] = function()
  local P
  -- Process is local to moonbox.proc; its methods are reachable through a spawned object only,
  -- so read them from the source: every `function Process:name(`.
  P = {}
  for name in read("lua/moonbox/proc.lua"):gmatch("\nfunction Process:([%a][%w_]*)%(") do P[name] = function() end end
  return P
end

-- The documented functions of receiver `recv` in doc.
local function documented(doc, recv)
  local out = {}
  for q in pairs(doc.funcs) do
    if q:sub(1, #recv) == recv and not q:sub(#recv + 1):find("[.:]") then out[q:sub(#recv + 1)] = true end
  end
  return out
end

describe("the reference (docs/reference)", function()
  for _, S in ipairs(SURFACES) do
    describe(S.doc, function()
      local doc = parse(DOCS .. S.doc)

      it("documents every public method and function, and no other", function()
        local problems = {}
        for recv, get in pairs(S.receivers) do
          local class = get()
          local code = methods(class)
          if recv == "mb.http." then code.OPTIONS, code.Stream = nil, nil end
          local docd = documented(doc, recv)
          for _, name in ipairs(minus(code, docd)) do
            problems[#problems + 1] = ("%s%s is in the code but not in docs/reference/%s: add a heading `### %s%s(...)` with its "
              .. "signature, options, return shape and error codes"):format(recv, name, S.doc, recv, name)
          end
          for _, name in ipairs(minus(docd, code)) do
            if not (S.extra and S.extra[recv .. name]) then problems[#problems + 1] = ("docs/reference/%s documents %s%s, which the code no longer has: remove or rename it")
              :format(S.doc, recv, name) end
          end
        end
        for q, where in pairs(S.extra or {}) do
          if not doc.funcs[q] then problems[#problems + 1] = ("%s is not documented in docs/reference/%s"):format(q, S.doc) end
          if not read(where.file):find(where.needle, 1, true) then
            problems[#problems + 1] = ("%s: %s no longer has %q: update docs/reference/%s and this spec"):format(q,
              where.file, where.needle, S.doc)
          end
        end
        -- a heading whose receiver no class stands for is a typo or a stale name
        for _, q in ipairs(doc.order) do
          local known = S.extra and S.extra[q]
          for recv in pairs(S.receivers) do
            if q:sub(1, #recv) == recv and not q:sub(#recv + 1):find("[.:]") then known = true end
          end
          if not known then problems[#problems + 1] = ("docs/reference/%s: heading %s names no known receiver"):format(S.doc, q) end
        end
        table.sort(problems)
        none(problems)
      end)

      it("lists every option field each strict call accepts, and no other", function()
        local problems = {}
        local want = S.options and S.options() or {}
        for q, fields in pairs(want) do
          local f = doc.funcs[q]
          local have = f and f.options or {}
          if not f then problems[#problems + 1] = ("docs/reference/%s: no heading for %s"):format(S.doc, q) end
          for _, name in ipairs(minus(fields, have)) do
            problems[#problems + 1] = ("%s accepts option %s: add a row `%s` to the option table under ### %s in docs/reference/%s")
              :format(q, name, name, q, S.doc)
          end
          if not (S.partial_options and S.partial_options[q]) then
            for _, name in ipairs(minus(have, fields)) do
              problems[#problems + 1] = ("docs/reference/%s lists option %s of %s, which the code does not accept"):format(S.doc,
                name, q)
            end
          else
            for _, name in ipairs(minus(have, fields)) do
              if name:match("^network%.") then
                problems[#problems + 1] = ("docs/reference/%s lists option %s of %s, which the code does not accept"):format(
                  S.doc, name, q)
              end
            end
          end
        end
        table.sort(problems)
        none(problems)
      end)

      it("lists every error code its sources construct, and no other", function()
        local code = {}
        for _, path in ipairs(S.sources) do code = union(code, codes_in(path)) end
        if S.extra_codes then code = union(code, S.extra_codes()) end
        for k in pairs(S.internal or {}) do code[k] = nil end
        local problems = {}
        for _, c in ipairs(minus(code, doc.codes)) do
          problems[#problems + 1] = ("%s can be returned (%s) but docs/reference/%s does not list it: add a row `%s` to its "
            .. "code table"):format(c, table.concat(S.sources, ", "), S.doc, c)
        end
        for _, c in ipairs(minus(doc.codes, code)) do
          problems[#problems + 1] = ("docs/reference/%s lists %s, which its sources no longer construct"):format(S.doc, c)
        end
        none(problems)
      end)
    end)
  end

  describe("plugins.md", function()
    local doc = parse(DOCS .. "plugins.md")
    local registry = require("moonbox.policies").defaults().composition.plugins

    it("documents every shipped plugin's config fields, types and defaults, and no other", function()
      local problems = {}
      local names = {}
      for name in pairs(registry) do names[name] = true end
      for _, n in ipairs(minus(names, doc.plugins)) do
        problems[#problems + 1] = ('plugin %q is shipped (policies/composition.lua) but docs/reference/plugins.md has no '
          .. '`## plugin "%s"`'):format(n, n)
      end
      for _, n in ipairs(minus(doc.plugins, names)) do
        problems[#problems + 1] = ("docs/reference/plugins.md documents plugin %q, which is not shipped"):format(n)
      end
      for name, modname in pairs(registry) do
        local schema = require(modname).schema or {}
        local fields = doc.plugins[name] or {}
        for _, f in ipairs(minus(schema, fields)) do
          problems[#problems + 1] = ('plugin %q has config field %s: add a row `%s` under ## plugin "%s" in docs/reference/plugins.md')
            :format(name, f, f, name)
        end
        for _, f in ipairs(minus(fields, schema)) do
          problems[#problems + 1] = ("docs/reference/plugins.md lists field %s of plugin %q, which its schema does not have")
            :format(f, name)
        end
        for f, spec in pairs(schema) do
          local row = fields[f]
          if row then
            if row.type ~= spec.type then
              problems[#problems + 1] = ("plugin %q field %s: the doc says type %s, the schema %s"):format(name, f,
                tostring(row.type), spec.type)
            end
            local d, cell = spec.default, row.default or ""
            local expr = ticked(cell)
            if d == nil then
              if cell ~= "—" then problems[#problems + 1] = ("plugin %q field %s has no default: write — (got %s)"):format(name, f, cell) end
            elseif type(d) == "function" then
              if expr then
                problems[#problems + 1] = ("plugin %q field %s: its default is computed at load time: describe it in prose")
                  :format(name, f)
              end
            else
              local chunk = expr and load("return " .. expr, "=default", "t", {})
              local ok, v = false, nil
              if chunk then ok, v = pcall(chunk) end
              local same = ok and (v == d or (type(v) == "table" and type(d) == "table" and next(v) == nil and next(d) == nil))
              if not same then
                problems[#problems + 1] = ("plugin %q field %s: the doc's default %s is not the schema's %s"):format(name, f,
                  cell, tostring(d))
              end
            end
          end
        end
      end
      table.sort(problems)
      none(problems)
    end)
  end)

  it("README.md indexes every reference file", function()
    local index = read(DOCS .. "README.md")
    local missing = {}
    for _, S in ipairs(SURFACES) do
      if not index:find("(" .. S.doc .. ")", 1, true) then missing[#missing + 1] = S.doc end
    end
    if not index:find("(plugins.md)", 1, true) then missing[#missing + 1] = "plugins.md" end
    none(missing)
  end)
end)
