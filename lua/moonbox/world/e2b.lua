-- moonbox.world.e2b — an E2B sandbox as an execution world (moonbox.world.common): the
-- handle owner:sandbox() hands the providers. Every process, tool and filesystem question is
-- ONE envd request: a process.Process/Start decoded in C (moonbox.pstream), or a unary RPC;
-- file contents go up with POST /files. A failure caused by the sandbox being gone (deleted,
-- expired) becomes E2B_SANDBOX_GONE (sb:explain: one control-plane request, on failure paths
-- only).
local errors = require "moonbox.errors"
local common = require "moonbox.world.common"

local M = {}
local Sandbox = {}
Sandbox.__index = Sandbox
M.Sandbox = Sandbox

local METHOD = "process.Process/Start"
M.TOOL_OUTPUT_MAX = common.TOOL_OUTPUT_MAX

function M.new(fields)
  fields.kind = "e2b"
  return setmetatable(fields, Sandbox)
end

-- Transport-level failures after which the sandbox itself may be what is missing.
local MAYBE_GONE = { E2B_TRUNCATED = true, E2B_IO = true, E2B_PROTOCOL = true, E2B_UNAVAILABLE = true,
  E2B_NOT_FOUND = true, E2B_HTTP = true, E2B_TIMEOUT = true, E2B_CONNECT_FAILED = true }

-- → E2B_SANDBOX_GONE when the control plane no longer knows a running sandbox of this id,
-- else err unchanged.
function Sandbox:explain(err, what)
  if not (errors.is(err) and MAYBE_GONE[err.code]) then return err end
  if self.gone then return self.gone end
  local how
  -- envd's front (E2B's edge, sandboxd) answers for a sandbox it no longer has
  if tostring(err.message):lower():find("sandbox was not found", 1, true) then
    how = "was deleted or expired"
  elseif self.api then
    local info, gerr = self.api:get(self.id)
    if info and info.state and info.state ~= "running" then how = "is " .. info.state
    elseif gerr and gerr.code == "E2B_NOT_FOUND" then how = "was deleted or expired" end
  end
  if not how then return err end
  self.gone = errors.new("E2B_SANDBOX_GONE", ("sandbox %s %s%s"):format(self.id, how,
    what and (" (" .. what .. ")") or ""), { cause = err, sandbox_id = self.id })
  return self.gone
end

function Sandbox:stream_error(s, err) return self.envd:stream_error(METHOD, s, err) end

-- `mbwrap <args>` with the caller's sinks. → stream | nil, err
function Sandbox:tool_stream(args, cfg, opts)
  opts = opts or {}
  local s, err = self.envd:process_stream(METHOD, {
    process = { cmd = self.wrapper, args = args, cwd = opts.cwd }, stdin = false,
  }, cfg)
  if not s then return nil, self:explain(err, "mbwrap " .. tostring(args[1])) end
  return s
end

-- Run one mbwrap tool. opts: cwd, timeout_ms, max_bytes (the answer's limit, default
-- TOOL_OUTPUT_MAX). → output bytes | nil, err (see common.tool_result)
function Sandbox:tool(args, opts)
  opts = opts or {}
  local max = opts.max_bytes or M.TOOL_OUTPUT_MAX
  local s, err = self:tool_stream(args, { stdout = { tail = max + 1 }, stderr = "discard" }, opts)
  if not s then return nil, err end
  return common.tool_result(self, s, args, max, opts.timeout_ms or self.timeouts.tool_ms)
end

-- Run a program directly (no shell, no wrapper) and collect its raw stdout/stderr, each up to
-- opts.max_bytes (default 1 MiB; more → E2B_TOO_LARGE). opts: envs, cwd, timeout_ms, user.
-- → { stdout, stderr, exit_code } | nil, err
function Sandbox:exec(argv, opts)
  opts = opts or {}
  local max = opts.max_bytes or 1024 * 1024
  local args = {}
  for i = 2, #argv do args[#args + 1] = argv[i] end
  local s, err = self.envd:process_stream(METHOD, {
    process = { cmd = argv[1], args = #args > 0 and args or nil, envs = opts.envs, cwd = opts.cwd },
    stdin = false,
  }, { raw = true, stdout = { tail = max + 1 }, stderr = { tail = 65536 } }, { user = opts.user })
  if not s then return nil, self:explain(err, argv[1]) end
  return common.exec_result(self, s, argv, max, opts.timeout_ms or self.timeouts.tool_ms)
end

-- A program run directly (no wrapper, no shell), its output into the sinks of `sinks`
-- ({ stdout =, stderr = }: moonbox.pstream sinks, raw bytes). opts: envs, cwd, user, stdin
-- (keep its stdin open for send_input / close_input), pty = { rows =, cols = } (on a new PTY of
-- that size: its output is the stdout sink's, its input send_input(s, pid, data, true), resize).
-- Facts: start (pid), end. → stream | nil, err
function Sandbox:command(argv, opts, sinks)
  opts = opts or {}
  local args = {}
  for i = 2, #argv do args[#args + 1] = argv[i] end
  local s, err = self.envd:process_stream(METHOD, {
    process = { cmd = argv[1], args = #args > 0 and args or nil, envs = opts.envs, cwd = opts.cwd },
    stdin = opts.stdin == true,
    pty = opts.pty and { size = { cols = opts.pty.cols, rows = opts.pty.rows } } or nil,
  }, { raw = true, stdout = sinks.stdout, stderr = sinks.stderr }, { user = opts.user })
  if not s then return nil, self:explain(err, argv[1]) end
  return s
end

-- `mbwrap <args>` as a managed process (its environment's values in the request's envs).
function Sandbox:run_process(args, envs, cwd, stdin_pipe, cfg)
  local s, err = self.envd:process_stream(METHOD, {
    process = { cmd = self.wrapper, args = args, envs = envs, cwd = cwd }, stdin = stdin_pipe,
  }, cfg)
  if not s then return nil, self:explain(err, "spawn") end
  return s
end

-- `mbwrap <args>` on a new PTY of rows × cols.
function Sandbox:run_terminal(args, envs, cwd, rows, cols, cfg)
  local s, err = self.envd:process_stream(METHOD, {
    process = { cmd = self.wrapper, args = args, envs = envs, cwd = cwd },
    pty = { size = { cols = cols, rows = rows } },
  }, cfg)
  if not s then return nil, self:explain(err, "terminal") end
  return s
end

local ok_or = function(r, err) if not r then return nil, err end return true end

function Sandbox:signal_process(_, pid, sig)
  return ok_or(self.envd:unary("process.Process/SendSignal", { process = { pid = pid }, signal = "SIGNAL_" .. sig }))
end

function Sandbox:send_input(_, pid, data, pty)
  return ok_or(self.envd:send_input(pid, data, pty))
end

function Sandbox:close_input(_, pid)
  return ok_or(self.envd:unary("process.Process/CloseStdin", { process = { pid = pid } }))
end

function Sandbox:resize(_, pid, rows, cols)
  return ok_or(self.envd:unary("process.Process/Update", { process = { pid = pid }, pty = { size = { cols = cols, rows = rows } } }))
end

function Sandbox:remove_tree(path)
  return ok_or(self.envd:unary("filesystem.Filesystem/Remove", { path = path }))
end

-- The fs write path: the content goes up to the staging path (POST /files, which makes the
-- parents), then `mbwrap publish ... STAGING TARGET` publishes it.
function Sandbox:stage(staging, content) return ok_or(self.envd:upload(staging, content)) end
function Sandbox:unstage(dir) return self:remove_tree(dir) end
function Sandbox:publish(args, _, max) return self:tool(args, { max_bytes = max }) end

-- A pack (core.sync_root():pack) streamed into the new file `path` (POST /files, chunked; envd
-- makes the parents). One request whatever the size. opts.timeout_ms: the whole transfer.
function Sandbox:put_stream(path, source, opts)
  opts = opts or {}
  local r, err = self.envd:upload(path, nil, { source = source, timeout_ms = opts.timeout_ms })
  if not r then return nil, self:explain(err, "upload " .. path) end
  return true
end

-- An identity for what this world is (workspace sync keys its records with it).
function Sandbox:identity() return "e2b:" .. tostring(self.id) end

return M
