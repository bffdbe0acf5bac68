-- envd's two Connect codecs against real sandboxd processes: the E2B providers speak binary
-- protobuf by default; a server that takes only JSON (sandboxd --envd-codecs json answers
-- binary requests 415, as a JSON-only envd would) turns the client to JSON by itself, for a
-- process stream (pstream's cfg.fallback reopens it in place) and for a unary call alike, with
-- the same results. Tagged #sandboxd: it starts its own sandboxds.
local H = require "support.helpers"
local compose = require "moonbox.compose"

describe("envd codecs #sandboxd", function()
  local mb, only_json, both
  setup(function()
    mb = require "moonbox"
    only_json = H.start_sandboxd{ args = { "--envd-codecs", "json" } }
    both = H.start_sandboxd()
  end)
  teardown(function()
    if only_json then H.stop_sandboxd(only_json) end
    if both then H.stop_sandboxd(both) end
  end)

  -- A composition on server d whose envd codec is `codec`; runs fn(ctx, sb) and disposes.
  local function with_ctx(d, codec, fn)
    return H.run(function()
      local env = { E2B_API_URL = d.url, E2B_SANDBOX_URL = d.url, E2B_API_KEY = d.key }
      local ctx = { policies = compose.policies(nil), getenv = function(n) return env[n] end }
      ctx.e2b = require("moonbox.e2b").new(ctx, { cwd = "/home/user/workspace", timeoutMs = 60000, envdCodec = codec })
      ctx.fs = require("moonbox.fs.e2b").new(ctx, { maxReadBytes = 1 << 20, diffBasisMaxBytes = 1 << 20 })
      ctx.subprocess = require("moonbox.subprocess.e2b").new(ctx, { frameLineMax = 40000, pipeBufferBytes = 262144 })
      local res = table.pack(pcall(function() return fn(ctx, assert(ctx.e2b:sandbox(60000))) end))
      ctx.subprocess:dispose()
      ctx.fs:dispose()
      ctx.e2b:dispose()
      if not res[1] then error(res[2], 0) end
      return table.unpack(res, 2, res.n)
    end, 120000)
  end

  local function requests() return mb.http.stats().requests end

  -- A command whose output and exit cross the stream: → stdout, stderr, exit code.
  local function run(ctx, sb)
    local h = assert(ctx.subprocess:spawn{ argv = { "/bin/sh", "-c", "printf 'out\\0%s' $((6*7)); printf err >&2; exit 3" },
      cwd = sb.cwd, graceMs = 500, stdio = { stdin = "ignore", stdout = { maxBytes = 4096 }, stderr = { maxBytes = 4096 } } })
    local o = assert(h:wait(30000))
    return h.collected.stdout:readFrom(0).text, h.collected.stderr:readFrom(0).text, o.exitCode
  end

  it("refuses binary requests on a JSON-only sandboxd with 415 (what the client falls back on)", function()
    with_ctx(only_json, "json", function(_, sb)
      for _, ct in ipairs{ "application/proto", "application/connect+proto" } do
        local method = ct == "application/proto" and "filesystem.Filesystem/Stat" or "process.Process/Start"
        local res = assert(mb.http.request{ method = "POST", url = only_json.url .. "/" .. method, body = "", max_bytes = 65536,
          headers = { ["Content-Type"] = ct, ["E2b-Sandbox-Id"] = sb.envd.sandbox_id, ["X-Access-Token"] = sb.envd.access_token } })
        assert.are.equal(415, res.status)
        assert.truthy(res.headers["accept-post"]:find("json", 1, true), res.headers["accept-post"])
      end
    end)
  end)

  -- A new envd client of sb's sandbox that has not spoken yet, in the binary codec.
  local function fresh_envd(sb)
    return require("moonbox.e2b.envd").new{ url = sb.envd.url, sandbox_id = sb.envd.sandbox_id,
      access_token = sb.envd.access_token, codec = "proto" }
  end

  -- A plain command's stream, read whole: → stdout, stderr, facts by kind.
  local function stream(envd)
    local s = assert(envd:process_stream("process.Process/Start",
      { process = { cmd = "/bin/sh", args = { "-c", "printf 'raw\\0out'; printf e >&2" } }, stdin = false },
      { raw = true, stdout = "pipe", stderr = { tail = 4096 }, max_message = 1 << 20, max_line = 40000 }))
    local out, facts = {}, {}
    while true do
      local c, err = s:read("stdout", 30000)
      if not c then assert(err == nil, tostring(err)) break end
      out[#out + 1] = c
    end
    while true do
      local f = s:next_facts(30000)
      if not f then break end
      for _, x in ipairs(f) do facts[x.kind] = x end
    end
    assert(s:result())
    local err = (s:read_from("stderr", 0))
    s:close()
    return table.concat(out), err, facts
  end

  it("falls back to JSON for a process stream (reopened in place) and stays there", function()
    with_ctx(only_json, "proto", function(_, sb)
      local envd = fresh_envd(sb)
      local before = requests()
      local out, err, facts = stream(envd)
      assert.are.equal("raw\0out", out); assert.are.equal("e", err)
      assert.truthy(facts.start and facts["end"] and facts.stream_end)
      assert.are.equal(2, requests() - before)   -- the refused binary Start, then the JSON one
      assert.are.equal("json", envd.codec)
      assert(envd:unary("filesystem.Filesystem/Stat", { path = "/home/user" }))
      assert.are.equal(3, requests() - before)   -- and JSON straight away from then on
    end)
  end)

  it("falls back to JSON for a unary call (retried once) and stays there", function()
    with_ctx(only_json, "proto", function(ctx, sb)
      local envd = fresh_envd(sb)
      local before = requests()
      local r = assert(envd:unary("filesystem.Filesystem/MakeDir", { path = "/home/user/codec-dir" }))
      assert.are.equal("/home/user/codec-dir", r.entry.path)
      assert.are.equal(2, requests() - before)
      assert.are.equal("json", envd.codec)
      local _, err = envd:unary("filesystem.Filesystem/Stat", { path = "/home/user/nope" })
      assert.are.equal("E2B_NOT_FOUND", err.code)
      local out = stream(envd)
      assert.are.equal("raw\0out", out)
      assert.are.equal(4, requests() - before)
      -- the providers on the same server work whatever codec they started with
      local o, e, code = run(ctx, sb)
      assert.are.equal("out\0" .. "42", o); assert.are.equal("err", e); assert.are.equal(3, code)
    end)
  end)

  it("keeps the binary codec on a sandboxd that serves both, with the same results", function()
    with_ctx(both, "proto", function(ctx, sb)
      local before = requests()
      local out, err, code = run(ctx, sb)
      assert.are.equal("out\0" .. "42", out); assert.are.equal("err", err); assert.are.equal(3, code)
      local r = assert(sb.envd:unary("filesystem.Filesystem/MakeDir", { path = "/home/user/codec-dir" }))
      assert.are.equal("FILE_TYPE_DIRECTORY", r.entry.type)
      local _, nf = sb.envd:unary("filesystem.Filesystem/Stat", { path = "/home/user/nope" })
      assert.are.equal("E2B_NOT_FOUND", nf.code)
      assert.are.equal("proto", sb.envd.codec)
      assert.is_true(requests() - before >= 3)
      local envd = fresh_envd(sb)
      before = requests()
      local o, e, facts = stream(envd)
      assert.are.equal("raw\0out", o); assert.are.equal("e", e); assert.truthy(facts["end"])
      assert(envd:unary("filesystem.Filesystem/Stat", { path = "/home/user" }))
      assert.are.equal(2, requests() - before)   -- no refusal, no retry
      assert.are.equal("proto", envd.codec)
    end)
  end)

end)
