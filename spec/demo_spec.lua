-- The README's first command, end to end: the demo composition on the embedded sandboxd (no
-- E2B_* variables, so moonbox starts and stops its own sandboxd), checked line by line.
describe("the demo composition #sandboxd", function()
  it("writes, compiles, edits, reruns, drives a terminal, kills a TERM-ignoring tree, leaves nothing", function()
    local build = os.getenv("MB_BUILD_DIR") or "build"
    local cmd = "env -u E2B_API_KEY -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_DOMAIN "
      .. build .. "/bin/moonbox run examples/demo/compose.lua examples/demo/demo.lua 2>&1; echo \"exit=$?\""
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    assert.matches("exit=0\n$", out)
    assert.matches("sandbox %w+ ready", out)
    assert.matches("compile: exit 0", out)
    assert.matches("| hello 3 from the sandbox", out, 1, true)
    assert.matches("| goodbye 1 ($& stays literal) from the sandbox", out, 1, true)
    assert.matches("terminal said: hi moonbox, 6%*7=42", out)
    assert.matches("TERM%-ignoring tree %(pgid %d+%): SIGKILL after %d+ ms; tree empty: true", out)
    assert.matches("'sleep 600' processes left in the sandbox: 0", out, 1, true)
    assert.matches("after disposal: local sandboxd running: false, its state directory present: false, mounts left: 0",
      out, 1, true)
  end)
end)
