-- A scripted sandbox handle (what owner:sandbox() returns) for unit specs of fs/subprocess:
-- every tool call and envd request is logged; answers come from handler functions.
local fake_http = require "support.fake_http"

local M = {}

function M.new(handlers)
  local core = fake_http.core()
  local log = {}
  local sb = { id = "isbx", cwd = "/home/user/workspace", root = "/tmp/.moonbox-x", wrapper = "/tmp/.moonbox-x/mbwrap",
    home = "/home/user", core = core, log = log,
    ambient = { PATH = "/usr/bin:/bin", HOME = "/home/user", LANG = "C.UTF-8", SANDBOX_API_TOKEN = "t", DSH_X = "1" } }
  local function call(kind, ...)
    log[#log + 1] = { kind = kind, args = table.pack(...) }
    local h = handlers[kind]
    assert(h, "fake sandbox: unexpected " .. kind)
    return h(...)
  end
  function sb:tool(args, opts) return call("tool", args, opts) end
  sb.envd = {
    unary = function(_, method, msg) return call("unary", method, msg) end,
    stream = function(_, method, msg, opts) return call("stream", method, msg, opts) end,
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

-- A scripted envd stream: items are messages, { sleep = ms }, or { err = e }.
function M.stream(items)
  local i = 0
  local s = { closed = false }
  function s:next()
    while true do
      i = i + 1
      local it = items[i]
      if it == nil then return nil end
      if it.sleep then require("moonbox").sleep(it.sleep)
      elseif it.err then return nil, it.err
      else return it end
    end
  end
  function s:close() self.closed = true end
  return s
end

return M
