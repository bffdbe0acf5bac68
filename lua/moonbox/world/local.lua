-- moonbox.world.local — this host as an execution world (moonbox.world.common), for the host
-- providers (plugins fs-local, subprocess-local). It runs the same static mbwrap the sandbox
-- runs, as host processes (core.pstream_spawn): every process gets the same process group,
-- environment, frames and TERM→grace→KILL of the whole tree, and every filesystem question the
-- same answer format and versions. Terminals are host PTYs (openpty; mbwrap exec --ctty makes
-- the terminal the program's controlling terminal). The host kernel decides permissions.
local errors = require "moonbox.errors"
local ids = require "moonbox.ids"
local common = require "moonbox.world.common"
local endpoints = require "moonbox.e2b.endpoints"
local pstream = require "moonbox.pstream"
local sched = require "moonbox.sched"
local events = require "moonbox.events"
local core = require "moonbox.core"
local binaries = require "moonbox.binaries"

local M = {}
local World = {}
World.__index = World
M.World = World


-- Helper processes (mbwrap tools, plain programs) running at once: a thousand concurrent fs
-- calls queue here instead of failing with EMFILE (each holds 3-4 descriptors). A user's own
-- spawn is never queued.
M.HELPER_SLOTS = 32

-- spawn, once a helper slot is free; the slot is released when the stream has closed.
function World:_helper(spawn, cfg)
  self.slots = self.slots or events.queue(M.HELPER_SLOTS)
  local ok, err = self.slots:push(true)
  if not ok then return nil, err end
  local s, serr = pstream.spawn(spawn, cfg)
  if not s then self.slots:pop() return nil, serr end
  sched.spawn(function() s:wait_closed() self.slots:pop() end)
  return s
end

-- opts: { cwd = default working directory (default: ours), timeouts } → world | nil, err
function M.new(opts)
  local wrapper = binaries.find("MOONBOX_MBWRAP", "mbwrap")
  if not wrapper then
    return nil, errors.new("MB_SETUP", "mbwrap binary not found (MOONBOX_MBWRAP / MB_BUILD_DIR)")
  end
  if wrapper:sub(1, 1) ~= "/" then
    local pwd = os.getenv("PWD")
    if not pwd then return nil, errors.new("MB_SETUP", "mbwrap path must be absolute: " .. wrapper) end
    wrapper = pwd .. "/" .. wrapper
  end
  local ambient = core.environ()
  local w = setmetatable({ kind = "local", core = core, timeouts = opts.timeouts, wrapper = wrapper,
    ambient = ambient, home = ambient.HOME or "/", cwd = opts.cwd or os.getenv("PWD") or "/",
    root = ("/tmp/moonbox-local.%d.%s"):format(core.getpid(), ids.hex(6)) }, World)
  local r, err = w:exec({ "/bin/mkdir", "-m", "700", "--", w.root })
  if not r then return nil, err end
  if r.exit_code ~= 0 then return nil, errors.new("MB_SETUP", "cannot make " .. w.root .. ": " .. r.stderr) end
  return w
end

-- A world made on first use, once however many tasks ask at the same time; a failure goes to
-- every task that waited for it and the next call tries again (an EMFILE is not forever).
-- → get() → world | nil, err;  dispose() → true | nil, err
function M.lazy(opts)
  local w, making
  local function get()
    if w then return w end
    if making then return making:wait() end
    local ev = events.event()
    making = ev
    local nw, err = M.new(opts)
    making, w = nil, nw
    ev:set(nw, err)
    return nw, err
  end
  local function dispose() if w then return w:dispose() end return true end
  return get, dispose
end

function World:explain(err) return err end
function World:stream_error(_, err) return err end

-- A start that failed (core: SPAWN_FAILED, or E2B_INVALID for a spawn it refused): a missing
-- cwd or program is the caller's, named.
local function start_error(err, what, cwd)
  if errors.is(err) and (err.code == "SPAWN_FAILED" or err.code == "E2B_INVALID") then
    return errors.new("SPAWN_FAILED", ("cannot start %s in cwd %q: %s"):format(what, tostring(cwd), err.message),
      { cause = err, cwd = cwd })
  end
  return err
end

-- opts: cwd, lasting (a long-running tool, watch: it takes no helper slot, which it would
-- hold for as long as it runs).
function World:tool_stream(args, cfg, opts)
  opts = opts or {}
  local argv = { self.wrapper }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local spawn = { argv = argv, cwd = opts.cwd }
  local s, err
  if opts.lasting then s, err = pstream.spawn(spawn, cfg) else s, err = self:_helper(spawn, cfg) end
  if not s then return nil, start_error(err, "mbwrap " .. tostring(args[1]), opts.cwd) end
  return s
end

function World:tool(args, opts)
  opts = opts or {}
  local max = opts.max_bytes or common.TOOL_OUTPUT_MAX
  local s, err = self:tool_stream(args, { stdout = { tail = max + 1 }, stderr = "discard" }, opts)
  if not s then return nil, err end
  return common.tool_result(self, s, args, max, opts.timeout_ms or self.timeouts.tool_ms)
end

-- A plain program (argv[1] absolute): stdout in a tail, stderr as the diagnostic text.
function World:exec(argv, opts)
  opts = opts or {}
  local max = opts.max_bytes or 1024 * 1024
  local s, err = self:_helper({ argv = argv, cwd = opts.cwd, env = opts.envs },
    { raw = true, stdout = { tail = max + 1 }, stderr = "discard" })
  if not s then return nil, start_error(err, argv[1], opts.cwd) end
  return common.exec_result(self, s, argv, max, opts.timeout_ms or (self.timeouts and self.timeouts.tool_ms) or 30000)
end

-- `mbwrap <args>` with exactly `envs` as its environment (mbwrap keeps the -K names of it).
function World:run_process(args, envs, cwd, stdin_pipe, cfg)
  local argv = { self.wrapper }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local s, err = pstream.spawn({ argv = argv, env = envs, cwd = cwd, stdin_pipe = stdin_pipe }, cfg)
  if not s then return nil, start_error(err, "the wrapper", cwd) end
  return s
end

-- `mbwrap exec --ctty ...` on a new PTY: the program leads a new session and the PTY is its
-- controlling terminal.
function World:run_terminal(args, envs, cwd, rows, cols, cfg)
  local argv = { self.wrapper, args[1], "--ctty" }
  for i = 2, #args do argv[#argv + 1] = args[i] end
  local s, err = pstream.spawn({ argv = argv, env = envs, cwd = cwd, pty = true, rows = rows, cols = cols }, cfg)
  if not s then return nil, start_error(err, "the terminal", cwd) end
  return s
end

function World:signal_process(s, _, sig) return s:kill(sig) end
function World:send_input(s, _, data) return s:write(data) end
function World:close_input(s) return s:close_input() end
function World:resize(s, _, rows, cols) return s:resize(rows, cols) end

function World:remove_tree(path)
  local r, err = self:exec({ "/bin/rm", "-rf", "--", path })
  if not r then return nil, err end
  if r.exit_code ~= 0 then return nil, errors.new("FS_IO_ERROR", "rm -rf " .. path .. ": " .. r.stderr) end
  return true
end

-- The fs write path: nothing is staged ahead; `mbwrap publish --stdin` makes the staging file
-- from its stdin (in 1 MiB pieces: the content is never copied whole) and publishes it.
function World:stage() return true end
function World:unstage() return true end

local PIECE = 1024 * 1024

function World:publish(args, content, max)
  local argv = { self.wrapper }
  for i, a in ipairs(args) do
    argv[#argv + 1] = a
    if i == 1 then argv[#argv + 1] = "--stdin" end
  end
  local s, err = self:_helper({ argv = argv, stdin_pipe = true }, { stdout = { tail = max + 1 }, stderr = "discard" })
  if not s then return nil, err end
  for off = 1, #content, PIECE do
    local ok, werr = s:write(content:sub(off, off + PIECE - 1))
    if not ok then
      s:close_input()
      common.tool_result(self, s, args, max, self.timeouts.tool_ms)
      return nil, errors.new("FS_IO_ERROR", "cannot hand the content over: " .. tostring(werr), { cause = werr })
    end
  end
  s:close_input()
  return common.tool_result(self, s, args, max, self.timeouts.tool_ms)
end

-- A pack (core.sync_root():pack) written into the new file `path`, its directory made 0700
-- (its parents as mkdir -p makes them), a piece at a time: the loop runs between pieces.
-- opts.piece: bytes per piece (default 1 MiB). → true | nil, err (the pack's own error first)
function World:put_stream(path, source, opts)
  opts = opts or {}
  local dir = path:match("^(.*)/[^/]+$")
  if not dir or dir == "" then return nil, errors.new("MB_INVALID", "put_stream: " .. path .. " has no directory") end
  local r, err = self:exec({ "/bin/mkdir", "-p", "-m", "700", "--", dir })
  if not r then return nil, err end
  if r.exit_code ~= 0 then return nil, errors.new("FS_IO_ERROR", "mkdir " .. dir .. ": " .. r.stderr) end
  local f, ferr = io.open(path, "wb")
  if not f then return nil, errors.new("FS_IO_ERROR", "cannot create " .. path .. ": " .. tostring(ferr)) end
  while true do
    local chunk, perr = source:read(opts.piece or PIECE)
    if not chunk then
      f:close()
      if perr then return nil, perr end
      return true
    end
    local ok, werr = f:write(chunk)
    if not ok then f:close() return nil, errors.new("FS_IO_ERROR", "cannot write " .. path .. ": " .. tostring(werr)) end
    local _, serr = sched.sleep(0)
    if serr then f:close() return nil, serr end
  end
end

function World:identity() return "local" end

-- Removes the runtime root (the spills of its processes).
function World:dispose()
  if self.disposed then return true end
  self.disposed = true
  return self:remove_tree(self.root)
end

return M
