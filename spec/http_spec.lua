-- The HTTP transport against a real local server (spec/support/server.py).
local mb = require "moonbox"
local H = require "spec.support.helpers"
local http = mb.http

describe("http", function()
  local srv
  setup(function() srv = H.start_server() end)
  teardown(function() H.stop_server(srv) end)
  local function url(p) return srv.url .. p end
  -- Reads s to its end: the bytes delivered and the error that ended it (nil when clean).
  local function drain(s)
    local n = 0
    while true do
      local c, e = s:read(5000)
      if not c then return n, e end
      n = n + #c
    end
  end
  -- A stream on /hang (one chunk "hello", then nothing), its first chunk already read.
  local function hanging_stream()
    local s = assert(http.stream{ url = url("/hang"), timeout_ms = 5000 })
    assert.equal("hello", s:read(5000))
    return s
  end

  it("unary request: status, lower-case headers, body", function()
    local res = H.run(function()
      return assert(http.request{ url = url("/ping"), max_bytes = 100, timeout_ms = 5000 })
    end)
    assert.equal(200, res.status)
    assert.equal("ok", res.body)
    assert.equal("2", res.headers["content-length"])
    assert.equal("text/plain", res.headers["content-type"])
  end)

  it("returns non-2xx responses as results, not errors", function()
    local res = H.run(function() return assert(http.request{ url = url("/status?code=404"), max_bytes = 10 }) end)
    assert.equal(404, res.status)
    assert.equal("", res.body)
  end)

  it("a body exactly at max_bytes is accepted", function()
    local res = H.run(function() return assert(http.request{ url = url("/big?n=1000"), max_bytes = 1000 }) end)
    assert.equal(1000, #res.body)
  end)

  it("an oversize body fails with E2B_TOO_LARGE (announced and chunked)", function()
    H.run(function()
      local res, err = http.request{ url = url("/big?n=100000"), max_bytes = 1000 }
      assert.is_nil(res)
      assert.equal("E2B_TOO_LARGE", err.code)
      -- chunked: no Content-Length, the write path must cut it off
      res, err = http.request{ url = url("/stream?chunks=10&size=1000"), max_bytes = 5000 }
      assert.is_nil(res)
      assert.equal("E2B_TOO_LARGE", err.code)
      assert.matches("max_bytes", err.message)
    end)
  end)

  it("a stream over its max_bytes total fails with E2B_TOO_LARGE", function()
    H.run(function()
      local s = assert(http.stream{ url = url("/stream?chunks=10&size=1000"), max_bytes = 4000, timeout_ms = 5000 })
      local n, err = drain(s)
      s:close()
      assert.is_true(n <= 4000, "delivered " .. n)
      assert.is_not_nil(err, "stream ended cleanly")
      assert.equal("E2B_TOO_LARGE", err.code)
    end)
  end)

  it("response headers beyond the limit are E2B_PROTOCOL", function()
    H.run(function()
      local ok = assert(http.request{ url = url("/headers?n=20"), max_bytes = 10 })
      assert.equal(("f"):rep(100), ok.headers["x-filler-19"])
      local res, err = http.request{ url = url("/headers?n=1000"), max_bytes = 10 }
      assert.is_nil(res)
      assert.equal("E2B_PROTOCOL", err.code)
      assert.matches("headers exceed", err.message)
    end)
  end)

  it("streams a chunked body in order", function()
    local got = H.run(function()
      local s = assert(http.stream{ url = url("/stream?chunks=20&size=1000"), timeout_ms = 5000 })
      assert.equal(200, s.status)
      assert.equal("chunked", s.headers["transfer-encoding"])
      local parts = {}
      while true do
        local c, err = s:read(5000)
        assert.is_nil(err)
        if not c then break end
        parts[#parts + 1] = c
      end
      s:close()
      return table.concat(parts)
    end)
    local want = {}
    for i = 0, 19 do want[#want + 1] = string.char(65 + i % 26):rep(1000) end
    assert.equal(table.concat(want), got)
  end)

  it("a slow consumer pauses the transfer (backpressure)", function()
    local total = 200 * 16384
    local info, n, ok_order = H.run(function()
      local s = assert(http.stream{ url = url("/stream?chunks=200&size=16384"), buffer_bytes = 65536, timeout_ms = 5000 })
      local n, ok_order, peak = 0, true, nil
      while true do
        local c, err = s:read(10000)
        assert.is_nil(err)
        if not c then break end
        -- byte n belongs to chunk n // 16384
        if c:sub(1, 1) ~= string.char(65 + (n // 16384) % 26) then ok_order = false end
        n = n + #c
        mb.sleep(2)
        peak = s:info()
      end
      local info = s:info()
      s:close()
      return info, n, ok_order, peak
    end, 60000)
    assert.equal(total, n)
    assert.is_true(ok_order)
    assert.is_true(info.pauses > 0, "transfer never paused")
    assert.is_true(info.max_buffered < total / 4, "buffered " .. info.max_buffered .. " of " .. total)
  end)

  it("closing a stream mid-body cancels it", function()
    H.run(function()
      local before = http.stats().active
      local s = hanging_stream()
      assert.equal(before + 1, http.stats().active)
      s:close()
      s:close() -- idempotent
      local c, err = s:read(100)
      assert.is_nil(c)
      assert.equal("MB_CLOSED", err.code)
      assert.equal(before, http.stats().active)
    end)
  end)

  it("closing a stream wakes a reader blocked in another task", function()
    H.run(function()
      local s = hanging_stream()
      local reader = mb.spawn(function() return s:read(30000) end)
      mb.sleep(1)
      s:close()
      local ok, c, err = reader:join(5000)
      assert.is_true(ok)
      assert.is_nil(c)
      assert.equal("MB_CLOSED", err.code)
    end)
  end)

  it("a stream dropped without close is collected and its transfer canceled", function()
    H.run(function()
      local before = http.stats().active
      local s = hanging_stream()
      assert.equal(before + 1, http.stats().active)
      local probe = setmetatable({ s }, { __mode = "v" })
      s = nil -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      assert.is_nil(probe[1])
      assert.equal(before, http.stats().active)
    end)
  end)

  it("a read deadline does not kill the stream", function()
    H.run(function()
      local s = hanging_stream()
      local c, err = s:read(20)
      assert.is_nil(c)
      assert.equal("MB_TIMEOUT", err.code)
      assert.is_false(s.req:done()) -- the transfer is still running
      local c2, err2 = s:read(20)   -- and can still be read (and time out again)
      assert.is_nil(c2)
      assert.equal("MB_TIMEOUT", err2.code)
      s:close()
    end)
  end)

  it("the server closing mid-body is an E2B_IO error", function()
    H.run(function()
      local s = assert(http.stream{ url = url("/close?after=100&promise=100000"), timeout_ms = 5000 })
      local n, err = drain(s)
      assert.equal(100, n)
      assert.is_not_nil(err, "stream ended cleanly")
      assert.equal("E2B_IO", err.code)
      s:close()
      local res, uerr = http.request{ url = url("/close?after=10&promise=1000"), max_bytes = 5000 }
      assert.is_nil(res)
      assert.equal("E2B_IO", uerr.code)
    end)
  end)

  it("connection refused is E2B_CONNECT_FAILED", function()
    H.run(function()
      local res, err = http.request{ url = "http://127.0.0.1:1/", max_bytes = 10, timeout_ms = 5000 }
      assert.is_nil(res)
      assert.equal("E2B_CONNECT_FAILED", err.code)
      assert.is_true(#err.message > 0)
      local s, serr = http.stream{ url = "http://127.0.0.1:1/", timeout_ms = 5000 }
      assert.is_nil(s)
      assert.equal("E2B_CONNECT_FAILED", serr.code)
    end)
  end)

  it("request and header timeouts are E2B_TIMEOUT", function()
    H.run(function()
      local res, err = http.request{ url = url("/delay?ms=3000"), max_bytes = 10, timeout_ms = 100 }
      assert.is_nil(res)
      assert.equal("E2B_TIMEOUT", err.code)
      local s, serr = http.stream{ url = url("/delay?ms=3000"), timeout_ms = 100 }
      assert.is_nil(s)
      assert.equal("E2B_TIMEOUT", serr.code)
      assert.equal(0, http.stats().active)
    end)
  end)

  it("TLS against a plain HTTP server is E2B_TLS", function()
    H.run(function()
      local res, err = http.request{ url = "https://127.0.0.1:" .. srv.port .. "/ping", max_bytes = 10, timeout_ms = 5000 }
      assert.is_nil(res)
      assert.equal("E2B_TLS", err.code)
    end)
  end)

  it("uploads a body streamed from a file", function()
    local path = os.tmpname()
    local parts = {}
    for i = 1, 3000 do parts[i] = string.format("%07d", i):rep(143) .. "\n" end
    local content = table.concat(parts)
    local f = assert(io.open(path, "wb")); f:write(content); f:close()
    local res = H.run(function()
      return assert(http.request{ method = "PUT", url = url("/echo?raw=1"), body_file = path,
                                  max_bytes = #content, timeout_ms = 10000 })
    end)
    os.remove(path)
    assert.equal(200, res.status)
    assert.equal(#content, #res.body)
    assert.is_true(content == res.body, "uploaded bytes differ")
  end)

  it("a missing upload file is E2B_IO", function()
    H.run(function()
      local res, err = http.request{ url = url("/echo"), body_file = "/nonexistent/file", max_bytes = 100 }
      assert.is_nil(res)
      assert.equal("E2B_IO", err.code)
      assert.matches("/nonexistent/file", err.message)
    end)
  end)

  it("sends custom headers and the method", function()
    local cjson = require "cjson"
    local doc = H.run(function()
      local res = assert(http.request{ method = "POST", url = url("/echo"), body = "{}",
        headers = { ["X-Test"] = "v1", ["Content-Type"] = "application/json", Authorization = "Bearer t" },
        max_bytes = 10000 })
      return cjson.decode(res.body)
    end)
    assert.equal("POST", doc.method)
    assert.equal("v1", doc.headers["x-test"])
    assert.equal("application/json", doc.headers["content-type"])
    assert.equal("Bearer t", doc.headers["authorization"])
    assert.equal(2, doc.body_len)
    assert.is_nil(doc.headers["expect"])
  end)

  it("reuses one keep-alive connection for sequential requests", function()
    local cjson = require "cjson"
    local ports, d_req, d_conn = H.run(function()
      local s0 = http.stats()
      local ports = {}
      for i = 1, 5 do
        local res = assert(http.request{ url = url("/echo"), max_bytes = 10000 })
        ports[i] = cjson.decode(res.body).client_port
      end
      local s1 = http.stats()
      return ports, s1.requests - s0.requests, s1.connects - s0.connects
    end)
    for i = 2, 5 do assert.equal(ports[1], ports[i]) end
    assert.equal(5, d_req)
    assert.is_true(d_conn <= 1, "opened " .. d_conn .. " connections")
  end)

  it("runs requests concurrently from many tasks", function()
    local bodies = H.run(function()
      local ts, out = {}, {}
      for i = 1, 8 do
        ts[i] = mb.spawn(function() return assert(http.request{ url = url("/big?n=" .. i * 100), max_bytes = 10000 }).body end)
      end
      for i = 1, 8 do local ok, b = ts[i]:join(10000); assert.is_true(ok); out[i] = #b end
      return out
    end)
    assert.same({ 100, 200, 300, 400, 500, 600, 700, 800 }, bodies)
  end)

  it("canceling the task aborts its request", function()
    H.run(function()
      local before = http.stats().active
      local t = mb.spawn(function() return http.request{ url = url("/delay?ms=5000"), max_bytes = 10 } end)
      mb.sleep(20)
      assert.equal(before + 1, http.stats().active)
      t:cancel()
      local ok, res, err = t:join(5000)
      assert.is_true(ok)
      assert.is_nil(res)
      assert.equal("MB_CANCELED", err.code)
      assert.equal(before, http.stats().active)
    end)
  end)

  it("bad arguments raise", function()
    H.run(function()
      assert.has_error(function() http.request{ max_bytes = 1 } end)                   -- no url
      assert.has_error(function() http.request{ url = url("/ping") } end)              -- no max_bytes
      assert.has_error(function() http.request{ url = url("/ping"), max_bytes = 1, headers = "x" } end)
      assert.has_error(function() http.request{ url = url("/ping"), max_bytes = 1, headers = { ["X-A"] = "a\r\nb" } } end)
      assert.has_error(function() http.request{ url = url("/ping"), max_bytes = 1, body = "a", body_file = "/x" } end)
      assert.has_error(function() http.request("nope") end)
      assert.has_error(function() http.request{ url = url("/ping"), max_bytes = 1, timeout = 5 } end,
        "http.request: unknown field timeout (expected url, method, headers, body, body_file, body_fd, body_source, stream, "
          .. "max_bytes, buffer_bytes, timeout_ms, connect_timeout_ms, idle_timeout_ms, ca_file, connect_to; the nearest is timeout_ms)")
    end)
    assert.has_error(function() http.request{ url = url("/ping"), max_bytes = 1 } end) -- outside a task
  end)

  it("a request refused after its body_file was opened does not leak the descriptor", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "wb")); f:write("x"); f:close()
    local function fds()
      local p = assert(io.popen("ls /proc/" .. mb.core.getpid() .. "/fd | wc -l"))
      local n = tonumber(p:read("a")); p:close()
      return n
    end
    assert.has_error(function() mb.core.http_request({ url = url("/ping") }, function() end) end,
      "http: max_bytes is required (> 0)")   -- buffered unless opts.stream or the third argument says so
    local before = fds()
    for _ = 1, 50 do   -- no max_bytes on a buffered request: raises after the file is open
      assert.has_error(function() mb.core.http_request({ url = url("/ping"), body_file = path }, function() end) end)
    end
    os.remove(path)
    local grew = fds() - before   -- (the transport's own connections may come and go meanwhile)
    assert.is_true(grew < 10, ("%d more descriptors after 50 refused requests"):format(grew))
  end)

  it("a malformed URL is E2B_INVALID", function()
    H.run(function()
      local res, err = http.request{ url = "http://[::1", max_bytes = 10 }
      assert.is_nil(res)
      assert.equal("E2B_INVALID", err.code)
    end)
  end)
  -- The cause of the "occasional hang": a task blocked on a stream is reachable only from C
  -- (weakly, through the stream's wake-up callback); without the scheduler's own strong set the
  -- task, its coroutine and the stream were collected together and the task never finished.
  it("tasks blocked on transfers that nothing in Lua references survive collection", function()
    local N = 50
    local done, failed = 0, {}
    H.run(function()
      for _ = 1, N do
        mb.spawn(function()               -- deliberately not kept anywhere
          local s, err = http.stream{ url = url("/stream?chunks=3&size=10&delay_ms=30"), timeout_ms = 20000 }
          if not s then failed[#failed + 1] = tostring(err) done = done + 1 return end
          while true do
            local c, rerr = s:read(20000)
            if not c then if rerr then failed[#failed + 1] = tostring(rerr) end break end
          end
          s:close()
          done = done + 1
        end)
      end
      local gc = mb.spawn(function() while true do collectgarbage() mb.sleep(2) end end)
      local t0 = mb.now()
      while done < N and mb.now() - t0 < 30000 do mb.sleep(20) end
      gc:cancel()
    end, 40000)
    assert.are.same({}, failed)
    assert.equal(N, done)
  end)
end)
