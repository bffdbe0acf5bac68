-- A scripted sandbox handle (what owner:sandbox() returns) for unit specs of fs/subprocess:
-- the real E2B world (moonbox.world.e2b) over a scripted envd and scripted mbwrap tools;
-- every tool call and envd request is logged; answers come from handler functions.
local fake_http = require "support.fake_http"
local fake_pstream = require "support.fake_pstream"

local M = {}

function M.new(handlers)
  local core = fake_http.core()
  local log = {}
  local sb = require("moonbox.world.e2b").new{ id = "isbx", cwd = "/home/user/workspace", root = "/tmp/.moonbox-x",
    wrapper = "/tmp/.moonbox-x/mbwrap", home = "/home/user", core = core, log = log,
    timeouts = require("moonbox.policies").default("timeouts"),
    ambient = { PATH = "/usr/bin:/bin", HOME = "/home/user", LANG = "C.UTF-8", SANDBOX_API_TOKEN = "t", DSH_X = "1" } }
  local function call(kind, ...)
    log[#log + 1] = { kind = kind, args = table.pack(...) }
    local h = handlers[kind]
    assert(h, "fake sandbox: unexpected " .. kind)
    return h(...)
  end
  function sb:tool(args, opts)
    -- a terminal that ends by itself sweeps its session (killsession): answered by default
    if args[1] == "killsession" and not handlers.tool then
      log[#log + 1] = { kind = "tool", args = table.pack(args, opts) }
      return "0\n"
    end
    return call("tool", args, opts)
  end
  function sb:explain(err) return err end
  sb.envd = {
    unary = function(_, method, msg) return call("unary", method, msg) end,
    -- as the JSON codec sends it
    send_input = function(_, pid, data, pty)
      local b64 = require("moonbox.core").b64encode(data)
      return call("unary", "process.Process/SendInput", { process = { pid = pid },
        input = pty and { pty = b64 } or { stdin = b64 } })
    end,
    -- handlers.stream returns a script for support.fake_pstream (or nil, err)
    process_stream = function(_, method, msg, cfg, opts)
      local items, err = call("stream", method, msg, opts, cfg)
      if not items then return nil, err end
      local s = fake_pstream.open(items, cfg)
      sb.last_stream = s
      return s
    end,
    stream_error = function(_, _, _, err) return err end,
    upload = function(_, path, data, opts) return call("upload", path, data, opts) end,
    download = function(_, path, opts) return call("download", path, opts) end,
    open_download = function(_, path, opts) return call("open_download", path, opts) end,
  }
  local owner = { sandbox = function() return sb end }
  return sb, owner, log
end

-- Encode wrapper frames as the base64 stdout payload of one envd data event.
function M.frames(core, lines)
  local out = {}
  for _, l in ipairs(lines) do
    if type(l) == "table" then out[#out + 1] = l[1] .. core.b64encode(l[2]) .. "\n"
    else out[#out + 1] = l .. "\n" end
  end
  return core.b64encode(table.concat(out))
end

return M
