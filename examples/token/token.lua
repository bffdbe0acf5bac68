-- Inside the sandbox: call the host with the rule (HTTPS and HTTP), then look for the token
-- everywhere the sandbox can read. The world's test server answers whether the Authorization
-- header arrived with the value whose SHA-256 it is given (never the value itself).
local bash = ctx.bash
local token = assert(os.getenv("DEMO_TOKEN"), "DEMO_TOKEN is not set")   -- the host's, read here only to check
local p = assert(io.popen("printf 'Bearer %s' " .. ("%q"):format(token) .. " | sha256sum"))
local want = p:read("l"):match("^(%x+)")
p:close()
local function run(label, command, env)
  local r = assert(bash:run{ command = command, env = env })
  io.write(("$ %s\n%s"):format(label, r.stdout .. r.stderr))
end
run("curl -s https://allowed.test/header/Authorization?sha256=<sha256 of 'Bearer $DEMO_TOKEN'>",
  "curl -s https://allowed.test/header/Authorization?sha256=$H", { H = want })
run("curl -s http://allowed.test/header/Authorization?sha256=...", "curl -s http://allowed.test/header/Authorization?sha256=$H", { H = want })
run("curl -s -H 'Authorization: Bearer forged' https://allowed.test/header/Authorization?sha256=...",
  "curl -s -H 'Authorization: Bearer forged' https://allowed.test/header/Authorization?sha256=$H", { H = want })
-- The search gets the token reversed on its stdin (so that no command line or environment of its
-- own holds it) and looks through every process's environment and command line and the files.
run("the token in any environment, command line or file inside? (as root)", [[
printf %s "$R" | sudo python3 -c '
import os, sys
v = sys.stdin.read()[::-1].encode()
def has(p):
    try: return v in open(p, "rb").read()
    except OSError: return False   # gone, or pid 1 (sandboxd-init: not dumpable)
hits = [p for d in os.listdir("/proc") if d.isdigit() for p in (f"/proc/{d}/environ", f"/proc/{d}/cmdline") if has(p)]
for top in ("/etc", "/home", "/tmp", "/root", "/usr/local", "/var"):
    for d, _, fs in os.walk(top):
        hits += [os.path.join(d, f) for f in fs if os.path.isfile(os.path.join(d, f)) and has(os.path.join(d, f))]
print("found in", len(hits), "places", *hits)']], { R = token:reverse() })
run("curl -s https://other.test/   (not in allow_out)", "curl -sS --max-time 5 https://other.test/ 2>&1; true")
