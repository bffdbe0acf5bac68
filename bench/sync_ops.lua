-- bench/sync_ops.lua — the moonbox side of bench/sync.sh (issue 13, "Benchmarks"). Run as
-- `moonbox run bench/sync_compose.lua bench/sync_ops.lua TREE ROUNDS` against the sandboxd that
-- E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY point at. Per round (the order alternates):
--   floor   GNU tar of TREE into a pipe drained to /dev/null, plus ONE upload (POST /files) of a
--           file of the archive's size — the issue's floor;
--   extract the sandbox's own `tar -x` of that uploaded archive (what materializing the files
--           costs there: floor + extract is the floor of any push that ends with the files);
--   push    ctx.workspace:push of TREE into a fresh directory (requests counted);
--   hash    the sandbox's own sha256sum of the pushed tree (the floor of any pull that hashes);
--   pull    after 10 files changed in the sandbox, ctx.workspace:pull (requests counted).
-- Prints a line per step, then one line `RESULT {json}` with every round and the medians.
local mb = require "moonbox"
local cjson = require "cjson"
local args = { ... }
local ctx = args[1]
local tree, rounds = assert(args[2], "TREE"), tonumber(args[3] or "3")
local sb = assert(ctx.e2b:sandbox())

local function reqs() return mb.http.stats().requests end
local function median(a)
  local s = {}
  for i, v in ipairs(a) do s[i] = v end
  table.sort(s)
  local n = #s
  if n == 0 then return nil end
  if n % 2 == 1 then return s[(n + 1) // 2] end
  return (s[n // 2] + s[n // 2 + 1]) / 2
end
local function host(cmd)
  local p = assert(mb.proc.spawn{ argv = { "/bin/sh", "-c", cmd }, max_buffer = 1 << 20 })
  local code = p:wait(600000)
  local out = p:read("stdout", 0) or ""
  local err = p:read("stderr", 0) or ""
  p:close()
  assert(code == 0, cmd .. ": " .. tostring(code) .. " " .. err)
  return out
end
local function world(cmd)
  local r = assert(sb:exec({ "/bin/sh", "-c", cmd }, { timeout_ms = 600000, max_bytes = 1 << 20 }))
  assert(r.exit_code == 0, cmd .. ": " .. r.stderr)
  return r.stdout
end
local function timed(fn)
  local t0, n0 = mb.now(), reqs()
  local r = table.pack(fn())
  return mb.now() - t0, reqs() - n0, table.unpack(r, 1, r.n)
end

local archive = os.getenv("MB_BENCH_WORK") .. "/floor.tar"
host(("tar -C '%s' -cf '%s' ."):format(tree, archive))   -- the file the floor uploads
local size = tonumber((host(("stat -c %%s '%s'"):format(archive)):gsub("%s", "")))
local R = { floor = {}, tar = {}, upload = {}, extract = {}, push = {}, push_requests = {}, hash = {}, pull = {},
  pull_requests = {}, archive_bytes = size }

for round = 1, rounds do
  local function floor()
    local t_tar = timed(function() return host(("tar -C '%s' -cf - . | cat > /dev/null"):format(tree)) end)
    local t_up = timed(function() return assert(sb.envd:upload("/home/user/floor.tar", nil, { file = archive, timeout_ms = 600000 })) end)
    local t_x = timed(function() return world("mkdir /home/user/floor-x && tar -x -p --no-same-owner -f /home/user/floor.tar -C /home/user/floor-x") end)
    world("rm -rf /home/user/floor-x /home/user/floor.tar")
    R.tar[#R.tar + 1], R.upload[#R.upload + 1], R.floor[#R.floor + 1], R.extract[#R.extract + 1] = t_tar, t_up, t_tar + t_up, t_x
    print(("round %d floor: tar %.0f ms + upload %.0f ms = %.0f ms; sandbox tar -x %.0f ms"):format(round, t_tar, t_up, t_tar + t_up, t_x))
  end
  local target = "/home/user/push-" .. round
  local function push()
    local ms, n, r = timed(function() return assert(ctx.workspace:push{ from = tree, to = target }) end)
    R.push[#R.push + 1], R.push_requests[#R.push_requests + 1] = ms, n
    print(("round %d push: %.0f ms, %d requests, %d files, %.1f MiB (archive %.1f MiB)"):format(round, ms, n, r.files,
      r.bytes / 1048576, r.archiveBytes / 1048576))
  end
  if round % 2 == 1 then floor() push() else push() floor() end
  local t_hash = timed(function() return world(("cd %s && find . -type f -print0 | xargs -0 -P 4 -n 512 sha256sum > /dev/null"):format(target)) end)
  world(("cd %s && for d in $(ls | head -10); do f=$(ls $d | head -1); echo changed-%d >> $d/$f; done"):format(target, round))
  local ms, n, p = timed(function() return assert(ctx.workspace:pull{ from = target, to = tree }) end)
  assert(#p.modified == 10, "10 files changed, pulled " .. #p.modified)
  R.hash[#R.hash + 1], R.pull[#R.pull + 1], R.pull_requests[#R.pull_requests + 1] = t_hash, ms, n
  print(("round %d pull after 10 changes: %.0f ms, %d requests (the sandbox's own sha256sum of the tree: %.0f ms)"):format(
    round, ms, n, t_hash))
  world("rm -rf " .. target)
end
for _, k in ipairs({ "floor", "tar", "upload", "extract", "push", "push_requests", "hash", "pull", "pull_requests" }) do
  R["median_" .. k] = median(R[k])
end
io.write("RESULT ", cjson.encode(R), "\n")
