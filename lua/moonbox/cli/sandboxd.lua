-- moonbox.cli.sandboxd — `moonbox sandboxd start|stop|status`: the per-user background sandboxd
-- (moonbox.e2b.background) that `moonbox sandbox|secret|sync` use when no E2B variable is set.
-- `moonbox sandboxd [OPTIONS...]` (an option first, or nothing) is sandboxd itself in the
-- foreground: core/main.c execs it without Lua. Exit status: 0 done (also: start when it runs
-- already, stop when it does not), 1 an error, 2 a usage mistake; status: 0 running, 3 not
-- running (as systemctl's).
local cjson = require "cjson"
local mb = require "moonbox"
local bg = require "moonbox.e2b.background"
local M = {}

M.COMMAND_HELP = {
  { path = "sandboxd", about = "Run the per-user background sandboxd that moonbox sandbox, secret and sync use when no "
    .. "E2B variable is set.",
    commands = { "start", "stop", "status" },
    usage = { "moonbox sandboxd [OPTIONS...]" },
    notes = "moonbox sandboxd [OPTIONS...] (an option first, or none) runs sandboxd itself in the foreground:\n"
      .. "sandboxd --help lists its options." },
  { path = "sandboxd start", usage = { "moonbox sandboxd start" },
    about = "Start the background sandboxd unless it runs, and wait until it listens.",
    notes = "Its files: $XDG_RUNTIME_DIR/moonbox/sandboxd (else /tmp/moonbox-<uid>/sandboxd): the lock it holds, its\n"
      .. "API key (mode 600, read with --api-key-file), its pid and URL (a free loopback port), sandboxd.log and\n"
      .. "its state directory. A record whose process is gone is replaced. Already running: says so, exit 0." },
  { path = "sandboxd stop", usage = { "moonbox sandboxd stop" },
    about = "Stop the background sandboxd: SIGTERM, then it destroys its sandboxes and exits.",
    notes = "SIGKILL if it has not exited after 30 seconds. Not running: says so, exit 0." },
  { path = "sandboxd status", usage = { "moonbox sandboxd status [--json]" },
    about = "Say whether the background sandboxd runs: its pid, URL, directory and sandbox count.",
    options = { { "--json", "print JSON: running, pid, url, dir, sandboxes" } },
    notes = "Exit status 0 when it runs, 3 when it does not." },
}

local function line(s) io.stdout:write(s, "\n") end

local function plural(n, one, many) return ("%d %s"):format(n, n == 1 and one or many) end

local function no_args(cli, argv, i, cmd, spec)
  local opts, pos = cli.parse(argv, i, spec or {}, "sandboxd " .. cmd)
  if argv[pos] then cli.usage_error("sandboxd %s: unexpected argument %s", cmd, argv[pos]) end
  return opts
end

local commands = {}

function commands.start(cli, argv, i)
  no_args(cli, argv, i, "start")
  return function(bg)
    local info, err = bg.start()
    if not info then return nil, err end
    if info.already then
      line(("sandboxd is already running (pid %d) at %s"):format(info.pid, info.url))
      return 0
    end
    if info.stale then line(("removed a stale record (%s)"):format(info.stale)) end
    line(("started sandboxd (pid %d) at %s; its files: %s"):format(info.pid, info.url, info.paths.dir))
    return 0
  end
end

function commands.stop(cli, argv, i)
  no_args(cli, argv, i, "stop")
  return function(bg)
    local r, err = bg.stop()
    if not r then return nil, err end
    if not r.was_running then
      line("sandboxd is not running" .. (r.stale and ("; removed a stale record (" .. r.stale .. ")") or ""))
      return 0
    end
    local what = r.sandboxes and (r.sandboxes == 0 and "it had no sandboxes"
      or (plural(r.sandboxes, "sandbox", "sandboxes") .. " destroyed")) or "its sandboxes destroyed"
    line(("stopped sandboxd (pid %d): %s%s, in %.1f s"):format(r.pid, what,
      r.killed and " (it did not exit on SIGTERM: killed)" or "", r.ms / 1000))
    return 0
  end
end

function commands.status(cli, argv, i)
  local opts = no_args(cli, argv, i, "status", { ["--json"] = "flag" })
  return function(bg)
    local st, err = bg.status()
    if not st then return nil, err end
    if opts["--json"] then
      local cj = cjson.new()
      local t = { running = st.running, dir = st.paths.dir }
      if st.running then t.pid, t.url, t.sandboxes = st.pid, st.url, st.sandboxes end
      if st.stale then t.stale = st.stale end
      line(cj.encode(t))
    elseif st.running then
      line("sandboxd: running")
      line(("pid:        %d"):format(st.pid))
      line(("url:        %s"):format(st.url or "(not yet listening)"))
      line(("directory:  %s"):format(st.paths.dir))
      line(("sandboxes:  %s"):format(st.sandboxes and tostring(st.sandboxes)
        or ("unknown (" .. tostring(st.sandboxes_err) .. ")")))
    else
      line("sandboxd: not running" .. (st.stale and (" (a stale record: " .. st.stale .. ")") or ""))
      line(("directory:  %s"):format(st.paths.dir))
    end
    return st.running and 0 or 3
  end
end

-- argv[i] is the subcommand. → exit status | nil, err
function M.main(cli, argv, i)
  local sub = cli.subcommand("sandboxd", argv, i, M.COMMAND_HELP[1].commands)
  local act = commands[sub](cli, argv, i + 1)
  local res = table.pack(mb.run(function() return act(bg) end))
  return table.unpack(res, 1, res.n)
end

return M
