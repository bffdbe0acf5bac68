-- A scripted stand-in for mb.http (and mb.pstream): records every request and answers from
-- a queue. Responses: { status=, headers=, body= } for request; { status=, headers=,
-- chunks={...}, err= } for stream and for a process stream (err ends the body after the
-- chunks; a process stream's chunks are decoded by the real C decoder, support.fake_pstream).
local cjson = require "cjson"

local M = {}

function M.new()
  local fake = { log = {}, queue = {} }
  function fake.push(resp) fake.queue[#fake.queue + 1] = resp end
  local function next_resp(req)
    fake.log[#fake.log + 1] = req
    local r = table.remove(fake.queue, 1)
    assert(r, "fake http: no scripted response for " .. tostring(req.method) .. " " .. tostring(req.url))
    return r
  end
  fake.http = {
    request = function(req)
      local r = next_resp(req)
      if r.fail then return nil, r.fail end
      if req.max_bytes and #(r.body or "") > req.max_bytes then
        return nil, { code = "E2B_TOO_LARGE", message = "body over max_bytes" }
      end
      return { status = r.status or 200, headers = r.headers or {}, body = r.body or "" }
    end,
    stream = function(req)
      local r = next_resp(req)
      if r.fail then return nil, r.fail end
      local i = 0
      local s = { status = r.status or 200, headers = r.headers or {}, closed = false, reads = 0 }
      function s:read()
        assert(not self.closed, "read after close")
        i = i + 1
        self.reads = self.reads + 1
        if r.chunks and i <= #r.chunks then return r.chunks[i] end
        if r.err then return nil, r.err end
        return nil
      end
      function s:close() self.closed = true end
      fake.last_stream = s
      return s
    end,
  }
  fake.pstream = {
    open = function(req, cfg)
      local r = next_resp(req)
      if r.fail then return nil, r.fail end
      local items = {}
      if (r.status or 200) ~= 200 then
        items[1] = { status = r.status, body = table.concat(r.chunks or {}) }
      else
        for _, c in ipairs(r.chunks or {}) do items[#items + 1] = { raw = c } end
        items[#items + 1] = r.err and { err = r.err } or { no_end = true }
      end
      local s = require("support.fake_pstream").open(items, cfg)
      fake.last_stream = s
      return s
    end,
  }
  return fake
end

-- Codec double used when the C core is not built: same shapes as moonbox.core.
function M.core()
  local ok, core = pcall(require, "moonbox.core")
  if ok then return core end
  local c = {}
  function c.envelope(flags, payload) return string.pack(">B I4", flags, #payload) .. payload end
  function c.b64encode(s)
    local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    return ((s:gsub(".", function(x)
      local r, b = "", x:byte()
      for i = 8, 1, -1 do r = r .. (b % 2 ^ i - b % 2 ^ (i - 1) > 0 and "1" or "0") end
      return r
    end) .. "0000"):gsub("%d%d%d?%d?%d?%d?", function(x)
      if #x < 6 then return "" end
      local n = 0
      for i = 1, 6 do n = n + (x:sub(i, i) == "1" and 2 ^ (6 - i) or 0) end
      return chars:sub(n + 1, n + 1)
    end) .. ({ "", "==", "=" })[#s % 3 + 1])
  end
  function c.sha256_hex(s) return string.format("%064x", #s) end
  local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  function c.b64decode(s)
    s = s:gsub("=", "")
    local bits = s:gsub(".", function(x)
      local n = B64:find(x, 1, true) - 1
      local r = ""
      for i = 6, 1, -1 do r = r .. (n % 2 ^ i - n % 2 ^ (i - 1) > 0 and "1" or "0") end
      return r
    end)
    return (bits:gsub("%d%d%d?%d?%d?%d?%d?%d?", function(x)
      if #x ~= 8 then return "" end
      return string.char(tonumber(x, 2))
    end))
  end
  function c.frame_decoder(max_line)
    local buf, finished = "", false
    local d = {}
    function d:push(bytes)
      buf = buf .. bytes
      local out = {}
      while true do
        local nl = buf:find("\n", 1, true)
        if not nl then
          if #buf > max_line then return nil, { code = "E2B_PROTOCOL", message = "line too long" } end
          break
        end
        local line = buf:sub(1, nl - 1)
        buf = buf:sub(nl + 1)
        if finished then return nil, { code = "E2B_PROTOCOL", message = "frame after !done" } end
        local k = line:sub(1, 1)
        if k == "o" or k == "e" then
          out[#out + 1] = { kind = k == "o" and "stdout" or "stderr", data = c.b64decode(line:sub(2)) }
        else
          local word, rest = line:match("^!(%S+) ?(.*)$")
          if word == "pgid" or word == "exit" or word == "signal" then
            out[#out + 1] = { kind = word, value = math.tointeger(tonumber(rest)) }
          elseif word == "spawn-error" then
            local en, msg = rest:match("^(%d+) (%S*)$")
            out[#out + 1] = { kind = "spawn_error", errno = tonumber(en), message = c.b64decode(msg) }
          elseif word == "empty" or word == "done" then
            out[#out + 1] = { kind = word }
            if word == "done" then finished = true end
          else
            return nil, { code = "E2B_PROTOCOL", message = "unknown frame " .. line }
          end
        end
      end
      return out
    end
    function d:finish()
      if buf ~= "" then return nil, { code = "E2B_PROTOCOL", message = "truncated" } end
      if not finished then return nil, { code = "E2B_PROTOCOL", message = "incomplete" } end
      return true
    end
    return d
  end
  function c.envelope_decoder(max)
    local buf = ""
    local d = {}
    function d:push(bytes)
      buf = buf .. bytes
      local out = {}
      while #buf >= 5 do
        local flags, len = string.unpack(">B I4", buf)
        if len > max then return nil, { code = "E2B_PROTOCOL", message = "message too large" } end
        if #buf < 5 + len then break end
        local data = buf:sub(6, 5 + len)
        buf = buf:sub(6 + len)
        local e = { flags = flags, data = data, end_stream = flags & 2 ~= 0 }
        if e.end_stream then
          local v = cjson.decode(data)
          if type(v.error) == "table" then e.error = { code = v.error.code, message = v.error.message } end
          e.metadata = {}
        end
        out[#out + 1] = e
      end
      return out
    end
    function d:finish()
      if buf ~= "" then return nil, { code = "E2B_PROTOCOL", message = "truncated envelope" } end
      return true
    end
    return d
  end
  return c
end

return M
