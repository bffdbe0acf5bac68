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

-- `moonbox dump-config`: the resolved tree of a composition, no sandbox needed.
describe("moonbox dump-config", function()
  local build = os.getenv("MB_BUILD_DIR") or "build"
  local function dump(file)
    local p = assert(io.popen(build .. "/bin/moonbox dump-config " .. file .. " 2>&1; echo \"exit=$?\""))
    local out = p:read("a")
    p:close()
    return out, tonumber(out:match("exit=(%d+)\n$"))
  end
  local function composition(text)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
    return path
  end

  it("prints the demo's three plugins, owner first, and the reverse dispose order", function()
    local out, code = dump("examples/demo/compose.lua")
    assert.are.equal(0, code, out)
    assert.truthy(out:find("\n1. e2b (moonbox.e2b) provides e2b  [examples/demo/compose.lua:5]\n", 1, true), out)
    assert.truthy(out:find("\n2. fs (moonbox.fs.e2b) provides fs injects e2b  [examples/demo/compose.lua:4]\n", 1, true), out)
    assert.truthy(out:find("\n3. subprocess (moonbox.subprocess.e2b) provides subprocess injects e2b  [examples/demo/compose.lua:3]\n", 1, true), out)
    assert.truthy(out:find('\n     cwd = "/home/user/workspace"\n', 1, true), out)
    assert.truthy(out:find("\ndispose order: subprocess, fs, e2b\n", 1, true), out)
  end)

  it("shows only the plugins mounted", function()
    local path = composition('plugin "e2b" {}\n')
    local out, code = dump(path)
    os.remove(path)
    assert.are.equal(0, code, out)
    out = out:sub(1, out:find("\npolicy env\n", 1, true))        -- the plugins, before the policy values
    assert.truthy(out:find("\n1. e2b (moonbox.e2b)", 1, true), out)
    assert.is_nil(out:find("moonbox.fs", 1, true)); assert.is_nil(out:find("moonbox.subprocess", 1, true))
    assert.truthy(out:find("\ndispose order: e2b\n", 1, true), out)
  end)

  it("exits non-zero naming file:line for an unknown plugin", function()
    local path = composition('plugin "e2b" {}\nplugin "nope" {}\n')
    local out, code = dump(path)
    os.remove(path)
    assert.are_not.equal(0, code, out)
    assert.truthy(out:find(path .. ':2: unknown plugin "nope"', 1, true), out)
    assert.is_nil(out:find("dispose order", 1, true))
  end)
end)
