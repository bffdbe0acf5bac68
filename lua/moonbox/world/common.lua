-- moonbox.world.common — what every execution world shares. A world is where programs run and
-- files live: an E2B sandbox (moonbox.world.e2b) or this host (moonbox.world.local). Both
-- run the same mbwrap for every process and every filesystem question, so the providers above
-- them (fs, subprocess) are one implementation with one semantics.
--
-- The world interface the providers use:
--   fields   cwd, home, ambient (environment table), wrapper (mbwrap's path), root (a private
--            runtime directory: spills), core, timeouts, kind ("e2b" | "local")
--   w:tool(args, opts)            an mbwrap tool's answer → text | nil, err (TOOL_<CODE> ...)
--   w:tool_stream(args, cfg, opts) a tool's process stream with the caller's sinks (cat; watch
--                                 with opts.lasting: it runs until it is stopped)
--   w:exec(argv, opts)            a program without the wrapper → { stdout, stderr, exit_code }
--   w:run_process(args, envs, cwd, stdin_pipe, cfg)   `mbwrap <args>` → process stream
--   w:run_terminal(args, envs, cwd, rows, cols, cfg)  `mbwrap <args>` on a new PTY → stream
--   w:signal_process(s, pid, sig); w:send_input(s, pid, data, pty); w:close_input(s, pid);
--   w:resize(s, pid, rows, cols)  → true | nil, err
--   w:stage(staging, content) / w:unstage(staging_dir) / w:publish(args, staging, content)
--                                 the fs write path (upload + publish, or publish --stdin)
--   w:remove_tree(path)           → true | nil, err
--   w:put_stream(path, pack, opts) a pack (core.sync_root():pack) streamed into a new file:
--                                 one upload in a sandbox, pieces written on the host
--   w:identity()                  "e2b:<sandbox id>" | "local" (workspace sync's records)
--   w:stream_error(s, err); w:explain(err, what)   error mapping
local errors = require "moonbox.errors"

local M = {}

M.TOOL_OUTPUT_MAX = 1024 * 1024 -- a tool's answer (publish's diff basis: see fs)

-- The facts of a stream that closed, and its error (an end-stream Connect error included).
function M.finished(w, s, timeout_ms)
  local ok, err = s:wait_closed(timeout_ms)
  local facts = {}
  while true do
    local f = s:next_facts(0)
    if not f then break end
    for _, x in ipairs(f) do
      facts[#facts + 1] = x
      if x.kind == "stream_error" and not err then
        err = errors.from_connect("process.Process/Start", x.code, x.message, 200)
      end
    end
  end
  if not ok and err and err.code ~= "MB_TIMEOUT" and err.code ~= "MB_CANCELED" then
    err = w:explain(w:stream_error(s, err), "process stream")
  end
  return facts, err
end

-- An mbwrap tool's answer from its closed stream (stdout in a tail of max + 1 bytes).
function M.tool_result(w, s, args, max, timeout_ms)
  local facts, ferr = M.finished(w, s, timeout_ms)
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

-- A plain program's result from its closed raw stream.
function M.exec_result(w, s, argv, max, timeout_ms)
  local facts, ferr = M.finished(w, s, timeout_ms)
  -- a local process's stderr is read as the stream's diagnostic text
  local out, total = s:read_from("stdout", 0), s:total("stdout")
  local errb = w.kind == "local" and s:diag() or s:read_from("stderr", 0)
  s:close()
  if ferr then return nil, ferr end
  if total > max then return nil, errors.new("E2B_TOO_LARGE", ("%s: output over %d bytes"):format(argv[1], max)) end
  local code
  for _, f in ipairs(facts) do if f.kind == "end" then code = f.exit_code end end
  if code == nil then return nil, errors.new("E2B_PROTOCOL", argv[1] .. ": stream ended without an end event") end
  return { stdout = out, stderr = errb, exit_code = code }
end

return M
