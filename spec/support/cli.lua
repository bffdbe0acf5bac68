-- The moonbox program from a spec, and the small file helpers the CLI specs share.
local M = {}

M.bin = (os.getenv("MB_BUILD_DIR") or "build") .. "/bin/moonbox"
if M.bin:sub(1, 1) ~= "/" then M.bin = assert(io.popen("pwd")):read("l") .. "/" .. M.bin end
-- A prefix that keeps every E2B_* endpoint variable from the program: nothing may reach a sandbox.
M.NO_E2B = "env -u E2B_API_KEY -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_DOMAIN"

function M.q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
function M.tmpdir()
  local d = os.tmpname(); os.remove(d); assert(os.execute("mkdir -p " .. M.q(d))); return d
end
function M.write(path, s) local f = assert(io.open(path, "w")); f:write(s); f:close(); return path end
function M.read(path) local f = assert(io.open(path)); local s = f:read("a"); f:close(); return s end

-- Runs `moonbox <args>` (args: shell words, quoted by the caller). o: dir (run there), prefix
-- (before the program: M.NO_E2B, "NAME=value ...", "env ..."), stdin_null, stdin (a file to read
-- stdin from). → exit status, stdout, stderr
function M.moonbox(args, o)
  o = o or {}
  local out, err = os.tmpname(), os.tmpname()
  local cmd = ("%s%s %s %s >%s 2>%s%s"):format(o.dir and ("cd " .. M.q(o.dir) .. " && ") or "", o.prefix or "",
    M.q(M.bin), args, M.q(out), M.q(err), o.stdin and (" <" .. M.q(o.stdin)) or o.stdin_null and " </dev/null" or "")
  local _, _, code = os.execute(cmd)
  local function slurp(p) local s = M.read(p); os.remove(p); return s end
  return code, slurp(out), slurp(err)
end

return M
