-- Wire shape checks for the control plane and envd clients against a scripted transport:
-- header names, JSON field names and the error rules of the protocol reference.
local cjson = require "cjson"
local fake_http = require "support.fake_http"
local api = require "moonbox.e2b.api"
local envd = require "moonbox.e2b.envd"

local core = fake_http.core()

describe("moonbox.api (control plane)", function()
  local fake, client
  before_each(function()
    fake = fake_http.new()
    client = api.new{ url = "http://api.test/", api_key = "e2b_00", http = fake.http }
  end)

  it("creates with the NewSandbox field names and X-API-KEY", function()
    fake.push{ status = 201, body = cjson.encode{ sandboxID = "iabc", templateID = "base",
      envdVersion = "0.6.3", envdAccessToken = "tok", domain = cjson.null } }
    local info = assert(client:create{ timeout_ms = 300001, metadata = { k = "v" } })
    assert.are.equal("iabc", info.id); assert.are.equal("tok", info.access_token); assert.is_nil(info.domain)
    local req = fake.log[1]
    assert.are.equal("POST", req.method)
    assert.are.equal("http://api.test/sandboxes", req.url)
    assert.are.equal("e2b_00", req.headers["X-API-KEY"])
    assert.are.equal("application/json", req.headers["Content-Type"])
    local body = cjson.decode(req.body)
    assert.are.same({ templateID = "base", metadata = { k = "v" }, timeout = 301, secure = true,
      allow_internet_access = true, autoPause = false, autoResume = { enabled = false } }, body)
    assert.is_number(req.max_bytes)
  end)

  it("treats a body code 404 on delete as already gone", function()
    fake.push{ status = 404, body = '{"code":404,"message":"sandbox not found"}' }
    assert.are.equal(false, client:delete("iabc"))
    assert.are.equal("DELETE", fake.log[1].method)
    assert.are.equal("http://api.test/sandboxes/iabc", fake.log[1].url)
  end)

  it("reports a delete failure that is not 'not found'", function()
    fake.push{ status = 500, body = '{"code":500,"message":"boom"}' }
    local ok, err = client:delete("iabc")
    assert.is_nil(ok); assert.are.equal("E2B_HTTP", err.code); assert.are.equal(500, err.status)
  end)

  it("decides not-found and conflict by the body code first", function()
    fake.push{ status = 400, body = '{"code":404,"message":"gone"}' }
    local _, err = client:get("x")
    assert.are.equal("E2B_NOT_FOUND", err.code)
    fake.push{ status = 409, body = '{"code":409,"message":"paused"}' }
    _, err = client:connect("x", 1000)
    assert.are.equal("E2B_CONFLICT", err.code)
    fake.push{ status = 401, body = '{"code":401,"message":"bad key"}' }
    _, err = client:get("x")
    assert.are.equal("E2B_UNAUTHORIZED", err.code)
  end)

  it("sends timeouts in whole seconds, rounded up", function()
    fake.push{ status = 204, body = "" }
    assert(client:set_timeout("iabc", 1500))
    assert.are.equal("http://api.test/sandboxes/iabc/timeout", fake.log[1].url)
    assert.are.same({ timeout = 2 }, cjson.decode(fake.log[1].body))
    fake.push{ status = 200, body = cjson.encode{ sandboxID = "iabc", envdVersion = "0.6.3" } }
    assert(client:connect("iabc", 60000))
    assert.are.same({ timeout = 60 }, cjson.decode(fake.log[2].body))
  end)

  it("lists with the v2 query and the next token header", function()
    fake.push{ status = 200, headers = { ["x-next-token"] = "n2" }, body = cjson.encode{ { sandboxID = "a" } } }
    local list, nt = client:list{ state = { "running", "paused" }, limit = 5 }
    assert.are.equal("a", list[1].id); assert.are.equal("n2", nt)
    assert.are.equal("http://api.test/v2/sandboxes?state=running,paused&limit=5", fake.log[1].url)
  end)

  it("rejects a success body without sandboxID", function()
    fake.push{ status = 201, body = "{}" }
    local _, err = client:create{}
    assert.are.equal("E2B_PROTOCOL", err.code)
  end)

  it("passes transport errors through", function()
    fake.push{ fail = { code = "E2B_CONNECT_FAILED", message = "refused" } }
    local _, err = client:get("x")
    assert.are.equal("E2B_CONNECT_FAILED", err.code)
  end)
end)

describe("moonbox.envd", function()
  local fake, client
  before_each(function()
    fake = fake_http.new()
    client = envd.new{ url = "http://sbx.test", sandbox_id = "iabc", access_token = "tok",
      http = fake.http, pstream = fake.pstream, core = core }
  end)

  it("sends unary calls with the Connect and routing headers", function()
    fake.push{ status = 200, headers = { ["content-type"] = "application/json" }, body = '{"entry":{"name":"a"}}' }
    local r = assert(client:unary("filesystem.Filesystem/Stat", { path = "/a" }))
    assert.are.equal("a", r.entry.name)
    local req = fake.log[1]
    assert.are.equal("http://sbx.test/filesystem.Filesystem/Stat", req.url)
    assert.are.equal("POST", req.method)
    assert.are.equal("1", req.headers["Connect-Protocol-Version"])
    assert.are.equal("application/json", req.headers["Content-Type"])
    assert.are.equal("iabc", req.headers["E2b-Sandbox-Id"])
    assert.are.equal("49983", req.headers["E2b-Sandbox-Port"])
    assert.are.equal("tok", req.headers["X-Access-Token"])
    assert.is_nil(req.headers["Authorization"])
    assert.is_nil(req.headers["Connect-Timeout-Ms"])
    assert.are.same({ path = "/a" }, cjson.decode(req.body))
  end)

  it("sends Basic auth with an empty password when a user is set", function()
    client.user = "root"
    fake.push{ status = 200, headers = { ["content-type"] = "application/json" }, body = "{}" }
    assert(client:unary("process.Process/List", {}))
    assert.are.equal("Basic cm9vdDo=", fake.log[1].headers["Authorization"])
  end)

  local errs = {
    { 404, "application/json", '{"code":"not_found","message":"file not found: /a"}', "E2B_NOT_FOUND", "not_found" },
    { 409, "application/json", '{"code":"already_exists","message":"exists"}', "E2B_ALREADY_EXISTS", "already_exists" },
    { 401, "application/json; charset=utf-8", '{"code":401,"message":"unauthorized"}', "E2B_UNAUTHENTICATED", "unauthenticated" },
    { 404, "text/plain", "nope", "E2B_UNIMPLEMENTED", "unimplemented" },
    { 502, "application/json", '{"code":502,"message":"The sandbox was not found"}', "E2B_UNAVAILABLE", "unavailable" },
    { 200, "text/plain", "hi", "E2B_UNKNOWN", "unknown" },
  }
  for _, c in ipairs(errs) do
    it(("maps %d %s to %s"):format(c[1], c[2], c[4]), function()
      fake.push{ status = c[1], headers = { ["content-type"] = c[2] }, body = c[3] }
      local r, err = client:unary("filesystem.Filesystem/Stat", { path = "/a" })
      assert.is_nil(r)
      assert.are.equal(c[4], err.code); assert.are.equal(c[5], err.connect_code)
    end)
  end

  local function env(flags, t) return core.envelope(flags, cjson.encode(t)) end

  -- Process streams: the request shape; the body is decoded in C (moonbox.pstream), here by
  -- the same decoder through support.fake_pstream.
  local function run(fn) return require("moonbox").run(fn) end

  it("opens process streams with keepalive, an idle limit and without a Connect deadline", function()
    local frames = "!pgid 9\no" .. core.b64encode("hi\n") .. "\n!exit 0\n!empty\n!done\n"
    local body = env(0, { event = { start = { pid = 7 } } }) .. env(0, { event = { data = { stdout = core.b64encode(frames) } } })
      .. env(0, { event = { ["end"] = { exited = true, status = "exit status 0" } } }) .. env(2, {})
    fake.push{ status = 200, headers = { ["content-type"] = "application/connect+json" },
      chunks = { body:sub(1, 3), body:sub(4, 40), body:sub(41) } }
    local facts, out = run(function()
      local s = assert(client:process_stream("process.Process/Start", { process = { cmd = "/bin/true" }, stdin = false },
        { stdout = { tail = 100 } }))
      assert(s:wait_closed(5000))
      local all = {}
      for _, f in ipairs(s:next_facts(0)) do all[#all + 1] = f.kind end
      return all, s:read_from("stdout", 0)
    end)
    local req = fake.log[1]
    assert.are.equal("http://sbx.test/process.Process/Start", req.url)
    assert.are.equal("application/connect+json", req.headers["Content-Type"])
    assert.are.equal("50", req.headers["Keepalive-Ping-Interval"])
    assert.is_nil(req.headers["Connect-Timeout-Ms"])
    assert.are.equal(150000, req.idle_timeout_ms)
    local flags, len = string.unpack(">B I4", req.body)
    assert.are.equal(0, flags)
    assert.are.same({ process = { cmd = "/bin/true" }, stdin = false }, cjson.decode(req.body:sub(6, 5 + len)))
    assert.are.same({ "start", "pgid", "exit", "empty", "done", "end", "stream_end" }, facts)
    assert.are.equal("hi\n", out)
  end)

  it("reports an end-stream error as a fact after the messages before it", function()
    fake.push{ status = 200, chunks = { env(0, { event = { start = { pid = 1 } } })
      .. env(2, { error = { code = "deadline_exceeded", message = "timed out" } }) } }
    local facts = run(function()
      local s = assert(client:process_stream("process.Process/Start", {}, { raw = true }))
      s:wait_closed(5000)
      return s:next_facts(0)
    end)
    assert.are.equal("start", facts[1].kind)
    assert.are.same({ "stream_error", "deadline_exceeded", "timed out" }, { facts[2].kind, facts[2].code, facts[2].message })
  end)

  it("fails a process stream that ends without an end-stream envelope", function()
    fake.push{ status = 200, chunks = { env(0, { event = { keepalive = {} } }) } }
    local ok, err = run(function()
      local s = assert(client:process_stream("process.Process/Start", {}, { raw = true }))
      return s:wait_closed(5000)
    end)
    assert.is_nil(ok); assert.truthy(err.message:find("EndStream", 1, true), err.message)
  end)

  it("maps a non-200 process stream answer like a unary one", function()
    fake.push{ status = 502, chunks = { '{"sandboxId":"iabc","message":"The sandbox was not found","code":502}' } }
    local err = run(function()
      local s = assert(client:process_stream("process.Process/Start", {}, { raw = true }))
      local _, e = s:wait_closed(5000)
      return client:stream_error("process.Process/Start", s, e)
    end)
    assert.are.equal("E2B_UNAVAILABLE", err.code)
    assert.truthy(err.message:find("The sandbox was not found", 1, true))
  end)

  -- The binary codec: the same Lua shapes, protobuf on the wire (core.rpc_encode/rpc_decode).
  describe("in the binary codec", function()
    before_each(function() client.codec = "proto" end)

    it("sends application/proto and decodes the protobuf answer", function()
      local answer = core.rpc_encode("filesystem.StatResponse", cjson.encode{ entry = { name = "a", size = "12" } })
      fake.push{ status = 200, headers = { ["content-type"] = "application/proto" }, body = answer }
      local r = assert(client:unary("filesystem.Filesystem/Stat", { path = "/a" }))
      assert.are.equal("a", r.entry.name); assert.are.equal("12", r.entry.size)
      local req = fake.log[1]
      assert.are.equal("application/proto", req.headers["Content-Type"])
      assert.are.same({ path = "/a" }, cjson.decode(core.rpc_decode("filesystem.StatRequest", req.body)))
    end)

    it("sends stdin as raw bytes in a SendInputRequest", function()
      fake.push{ status = 200, headers = { ["content-type"] = "application/proto" }, body = "" }
      assert(client:send_input(42, "a\0b\255", false))
      local j = cjson.decode(core.rpc_decode("process.SendInputRequest", fake.log[1].body))
      assert.are.same({ process = { pid = 42 }, input = { stdin = core.b64encode("a\0b\255") } }, j)
    end)

    for _, refusal in ipairs{
      { 415, "text/plain", "unsupported media type" },
      { 404, "application/json", '{"code":"unimplemented","message":"no proto here"}' },
    } do
      it(("turns to JSON for good when the server answers %d %s"):format(refusal[1], refusal[2]), function()
        fake.push{ status = refusal[1], headers = { ["content-type"] = refusal[2] }, body = refusal[3] }
        fake.push{ status = 200, headers = { ["content-type"] = "application/json" }, body = '{"entry":{"name":"a"}}' }
        fake.push{ status = 200, headers = { ["content-type"] = "application/json" }, body = '{}' }
        assert.are.equal("a", assert(client:unary("filesystem.Filesystem/Stat", { path = "/a" })).entry.name)
        assert(client:unary("filesystem.Filesystem/Remove", { path = "/a" }))
        assert.are.equal("json", client.codec)
        assert.are.equal("application/proto", fake.log[1].headers["Content-Type"])
        assert.are.same({ "application/json", "application/json" },
          { fake.log[2].headers["Content-Type"], fake.log[3].headers["Content-Type"] })
        assert.are.same({ path = "/a" }, cjson.decode(fake.log[2].body))
      end)
    end

    it("names the method when a protobuf answer does not decode", function()
      fake.push{ status = 200, headers = { ["content-type"] = "application/proto" }, body = "\255\255\255" }
      local r, err = client:unary("filesystem.Filesystem/Stat", { path = "/a" })
      assert.is_nil(r); assert.are.equal("E2B_PROTOCOL", err.code)
      assert.truthy(err.message:find("filesystem.Filesystem/Stat", 1, true), err.message)
    end)

    it("refuses a request that does not fit the message, naming the field", function()
      local r, err = client:unary("filesystem.Filesystem/Stat", { path = 7 })
      assert.is_nil(r); assert.are.equal("E2B_INVALID", err.code)
      assert.truthy(err.message:find("path", 1, true), err.message)
      assert.are.equal(0, #fake.log)
    end)
  end)

  it("downloads with routing headers and a URL-encoded path", function()
    fake.push{ status = 200, headers = { ["content-length"] = "5" }, chunks = { "he", "llo" } }
    assert.are.equal("hello", assert(client:download("/w/a b.txt", { max_bytes = 5 })))
    local req = fake.log[1]
    assert.are.equal("GET", req.method)
    assert.are.equal("http://sbx.test/files?path=/w/a%20b.txt", req.url)
    assert.are.equal("iabc", req.headers["E2b-Sandbox-Id"])
    assert.are.equal("tok", req.headers["X-Access-Token"])
  end)

  it("refuses a download whose announced size exceeds max_bytes before reading", function()
    fake.push{ status = 200, headers = { ["content-length"] = "6" }, chunks = { "abcdef" } }
    local r, err = client:download("/a", { max_bytes = 5 })
    assert.is_nil(r); assert.are.equal("E2B_TOO_LARGE", err.code)
    assert.are.equal(0, fake.last_stream.reads); assert.is_true(fake.last_stream.closed)
  end)

  it("stops a chunked download at the first byte over max_bytes", function()
    fake.push{ status = 200, chunks = { "abc", "def", "ghi" } }
    local r, err = client:download("/a", { max_bytes = 5 })
    assert.is_nil(r); assert.are.equal("E2B_TOO_LARGE", err.code)
    assert.are.equal(2, fake.last_stream.reads); assert.is_true(fake.last_stream.closed)
  end)

  it("streams a download without any cap when max_bytes is false", function()
    fake.push{ status = 200, headers = { ["content-length"] = "9" }, chunks = { "abc", "def", "ghi" } }
    local d = assert(client:open_download("/a", { max_bytes = false }))
    local parts = {}
    while true do
      local c, err = d.read()
      assert.is_nil(err)
      if not c then break end
      parts[#parts + 1] = c
    end
    assert.are.equal("abcdefghi", table.concat(parts))
    assert.are.equal(0, fake.log[1].max_bytes)      -- the transport's "no cap"
    assert.has_error(function() client:open_download("/a", {}) end)
  end)

  it("uploads and runs processes as another user when asked (root install)", function()
    fake.push{ status = 200, body = '[{"path":"/opt/x/mbwrap","name":"mbwrap","type":"file"}]' }
    assert(client:upload("/opt/x/mbwrap", nil, { file = "/tmp/mbwrap", user = "root" }))
    assert.are.equal("http://sbx.test/files?path=/opt/x/mbwrap&username=root", fake.log[1].url)
    fake.push{ status = 200, chunks = { core.envelope(2, "{}") } }
    run(function() assert(client:process_stream("process.Process/Start", {}, { raw = true }, { user = "root" })) end)
    assert.are.equal("Basic cm9vdDo=", fake.log[2].headers["Authorization"])
    fake.push{ status = 200, chunks = { core.envelope(2, "{}") } }
    run(function() assert(client:process_stream("process.Process/Start", {}, { raw = true })) end)
    assert.is_nil(fake.log[3].headers["Authorization"])
  end)

  it("maps download errors by status", function()
    fake.push{ status = 404, chunks = { '{"code":404,"message":"path \'/a\' does not exist"}' } }
    local r, err = client:download("/a", { max_bytes = 5 })
    assert.is_nil(r); assert.are.equal("E2B_NOT_FOUND", err.code)
    assert.truthy(err.message:find("does not exist", 1, true))
  end)

  it("uploads one multipart part named file", function()
    fake.push{ status = 200, body = '[{"path":"/w/a","name":"a","type":"file"}]' }
    local entries = assert(client:upload("/w/a", "x--y", { metadata = { v = "1" } }))
    assert.are.equal("/w/a", entries[1].path)
    local req = fake.log[1]
    assert.are.equal("http://sbx.test/files?path=/w/a", req.url)
    assert.are.equal("1", req.headers["X-Metadata-v"])
    local boundary = req.headers["Content-Type"]:match("^multipart/form%-data; boundary=(.+)$")
    assert.truthy(boundary)
    -- the content is one piece of its own (never copied into a joined body)
    assert.are.equal(3, #req.body)
    assert.are.equal("x--y", req.body[2])
    assert.are.equal(table.concat{ "--", boundary, "\r\n",
      'Content-Disposition: form-data; name="file"; filename="/w/a"\r\n',
      "Content-Type: application/octet-stream\r\n\r\nx--y\r\n--", boundary, "--\r\n" }, table.concat(req.body))
  end)

  it("streams an upload from a host file as octet-stream", function()
    fake.push{ status = 200, body = '[{"path":"/r/mbwrap","name":"mbwrap","type":"file"}]' }
    assert(client:upload("/r/mbwrap", nil, { file = "/tmp/mbwrap" }))
    assert.are.equal("/tmp/mbwrap", fake.log[1].body_file)
    assert.are.equal("application/octet-stream", fake.log[1].headers["Content-Type"])
  end)
end)
