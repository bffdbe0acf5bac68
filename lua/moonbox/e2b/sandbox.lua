-- moonbox.e2b.sandbox — the handle the providers share (owner:sandbox() hands it out): the
-- sandbox's id, envd client, cwd, private runtime root, wrapper path, login home and ambient
-- environment, and two ways to run something there, both ONE process.Process/Start decoded in
-- C (moonbox.procstream) with a single wake-up when it ends:
--   sb:tool(args, opts)  an mbwrap tool (realpath, stat, publish, which, fg, signal, killsession)
--   sb:exec(argv, opts)  a program without the wrapper (setup scripts), raw stdout and stderr
-- and sb:explain(err): a failure caused by the sandbox being gone (deleted, expired) becomes
-- E2B_SANDBOX_GONE (one control-plane request, on failure paths only).
local errors = require "moonbox.errors"

local M = {}
local Sandbox = {}
Sandbox.__index = Sandbox
M.Sandbox = Sandbox

M.TOOL_OUTPUT_MAX = 1024 * 1024 -- a tool's answer (publish's diff basis travels separately)

function M.new(fields) return setmetatable(fields, Sandbox) end

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

-- The facts of a stream that closed, and its error (an end-stream Connect error included).
local function finished(sb, s, method, timeout_ms)
  local ok, err = s:wait_closed(timeout_ms)
  local facts = {}
  while true do
    local f = s:next_facts(0)
    if not f then break end
    for _, x in ipairs(f) do
      facts[#facts + 1] = x
      if x.kind == "stream_error" and not err then
        err = require("moonbox.e2b.envd").rpc_error(method, x.code, x.message, 200)
      end
    end
  end
  if not ok and err and err.code ~= "MB_TIMEOUT" and err.code ~= "MB_CANCELED" then
    err = sb:explain(sb.envd:stream_error(method, s, err), method)
  end
  return facts, err
end

-- Run one mbwrap tool. opts: cwd, timeout_ms, max_bytes (the answer's limit, default
-- TOOL_OUTPUT_MAX). → output bytes | nil, err. A failing tool reports "err CODE detail" and
-- exit 1 → err.code = "TOOL_" .. CODE, err.tool_code = CODE.
function Sandbox:tool(args, opts)
  opts = opts or {}
  local max = opts.max_bytes or M.TOOL_OUTPUT_MAX
  local method = "process.Process/Start"
  local s, err = self.envd:process_stream(method, {
    process = { cmd = self.wrapper, args = args, cwd = opts.cwd }, stdin = false,
  }, { stdout = { tail = max + 1 }, stderr = "discard" })
  if not s then return nil, self:explain(err, "mbwrap " .. tostring(args[1])) end
  local facts, ferr = finished(self, s, method, opts.timeout_ms or self.timeouts.tool_ms)
  local total = s:total("stdout")
  local text = s:read_from("stdout", 0)
  s:close()
  if ferr then return nil, ferr end
  if total > max then
    return nil, errors.new("E2B_TOO_LARGE", ("mbwrap %s: answer over %d bytes"):format(tostring(args[1]), max))
  end
  local exit_code, done
  for _, f in ipairs(facts) do
    if f.kind == "exit" then exit_code = f.value elseif f.kind == "done" then done = true end
  end
  if not done or exit_code == nil then
    return nil, errors.new("E2B_PROTOCOL", "mbwrap " .. tostring(args[1]) .. ": incomplete tool output")
  end
  if exit_code ~= 0 then
    local code, detail = text:match("^err (%S+) ?(.-)\n?$")
    return nil, errors.new("TOOL_" .. (code or "FAILED"), ("mbwrap %s: %s"):format(args[1], detail or text),
      { tool_code = code, exit_code = exit_code })
  end
  return text
end

-- Run a program directly (no shell, no wrapper) and collect its raw stdout/stderr, each up to
-- opts.max_bytes (default 1 MiB; more → E2B_TOO_LARGE). opts: envs, cwd, timeout_ms, user.
-- → { stdout, stderr, exit_code } | nil, err
function Sandbox:exec(argv, opts)
  opts = opts or {}
  local max = opts.max_bytes or 1024 * 1024
  local args = {}
  for i = 2, #argv do args[#args + 1] = argv[i] end
  local method = "process.Process/Start"
  local s, err = self.envd:process_stream(method, {
    process = { cmd = argv[1], args = #args > 0 and args or nil, envs = opts.envs, cwd = opts.cwd },
    stdin = false,
  }, { raw = true, stdout = { tail = max + 1 }, stderr = { tail = 65536 } }, { user = opts.user })
  if not s then return nil, self:explain(err, argv[1]) end
  local facts, ferr = finished(self, s, method, opts.timeout_ms or self.timeouts.tool_ms)
  local out, errb, total = s:read_from("stdout", 0), s:read_from("stderr", 0), s:total("stdout")
  s:close()
  if ferr then return nil, ferr end
  if total > max then return nil, errors.new("E2B_TOO_LARGE", ("%s: output over %d bytes"):format(argv[1], max)) end
  local code
  for _, f in ipairs(facts) do if f.kind == "end" then code = f.exit_code end end
  if code == nil then return nil, errors.new("E2B_PROTOCOL", argv[1] .. ": stream ended without an end event") end
  return { stdout = out, stderr = errb, exit_code = code }
end

return M
