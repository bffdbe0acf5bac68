-- moonbox.e2b.template — a template description (moonbox.template) built by E2B's template API,
-- as the SDK's Template.build() speaks it, against E2B's cloud or a sandboxd:
--   1. POST /v3/templates { name, cpuCount, memoryMB } → { templateID, buildID }
--   2. each COPY: its files hash (below); GET /templates/{id}/files/{hash} → { present } or
--      { url, headers? }: the sources as a gzip tar (the host's `tar`, run by moonbox.proc), PUT
--      to url with those headers
--   3. POST /v2/templates/{id}/builds/{buildID} (TemplateBuildStartV2: fromTemplate | fromImage,
--      steps, startCmd, readyCmd, force)
--   4. GET /templates/{id}/builds/{buildID}/status?logsOffset=N until ready or error: each new
--      log entry to opts.onLogs as it comes.
-- The files hash is the build cache's key for a COPY (the server never recomputes it): sha256 over
-- "COPY src dest" and, for each entry under src in path order, its relative path, type, mode,
-- size and content's sha256 (a link: its target), made with the core's sync walker
-- (core.sync_root; no file is read whole into memory). uid, gid and times are left out, as the
-- SDK leaves them out.
-- Errors: TEMPLATE_INVALID (the description), TEMPLATE_FILES (a COPY's sources: missing, not
-- archivable, the upload refused), TEMPLATE_BUILD_FAILED (the build failed: `step`, `where` (the
-- file:line of the step), `reason`, `logs`), MB_TIMEOUT (opts.timeoutMs passed: the build may go
-- on); the control plane's and the sync walker's codes (SYNC_*) as they come.
local cjson = require("cjson").new()
local core = require "moonbox.core"
local errors = require "moonbox.errors"
local fields = require "moonbox.fields"
local http = require "moonbox.http"
local proc = require "moonbox.proc"
local sched = require "moonbox.sched"
local T = require "moonbox.template"
local api_mod = require "moonbox.e2b.api"

local M = {}

M.BUILD_FIELDS = { "name", "tags", "skipCache", "onLogs", "timeoutMs" }
local POLL_MS = 250                          -- between two status requests (the SDK's is 200 ms)
local UPLOAD_TIMEOUT_MS = 10 * 60 * 1000     -- one upload
local HASH_STEP = 1024 * 1024                -- bytes hashed per step (the loop stays responsive)
local SCAN_STEP = 2000                       -- entries per scan step
local DEFAULT_TIMEOUT_MS = 60 * 60 * 1000

local urlencode = api_mod.urlencode

local function now_text() return os.date("!%Y-%m-%dT%H:%M:%SZ") end

local function files_err(fmt, ...) return errors.new("TEMPLATE_FILES", fmt:format(...)) end

local function hash_file(root, rel)
  local h, err = root:hash(rel)
  if not h then return nil, err end
  while true do
    local hex, e = h:step(HASH_STEP)
    if hex == nil then h:close() return nil, e end
    if hex then return hex end
  end
end

local function entry_line(path, e, sum)
  return table.concat({ path, e.type, ("%o"):format(e.mode or 0), tostring(e.size or 0), sum or e.link or "" }, "\0") .. "\n"
end

-- The files hash of a COPY step (see above). context: the directory src is relative to.
-- → 64 hex | nil, err (TEMPLATE_FILES: no such source; SYNC_*: the walk)
function M.files_hash(context, src, dest)
  local root, err = core.sync_root(context)
  if not root then return nil, files_err("COPY %s: the context directory %s: %s", src, context, err.message) end
  local top
  if src == "." then top = { type = "directory" }
  else top, err = root:lstat(src) end
  if top == nil then root:close() return nil, err end
  if top == false then root:close() return nil, files_err("COPY %s: no such file or directory in %s", src, context) end
  local parts = { "moonbox-copy-v1\0COPY " .. src .. " " .. dest .. "\n" }
  if top.type ~= "directory" then
    local sum
    if top.type == "file" then
      sum, err = hash_file(root, src)
      if not sum then root:close() return nil, err end
    end
    parts[#parts + 1] = entry_line(src, top, sum)
    root:close()
    return core.sha256_hex(table.concat(parts))
  end
  root:close()
  local dir = src == "." and context or (context .. "/" .. src)
  local sub
  sub, err = core.sync_root(dir)
  if not sub then return nil, files_err("COPY %s: %s", src, err.message) end
  local scan, serr = sub:scan{}
  if not scan then sub:close() return nil, serr end
  repeat
    local done, e = scan:step(SCAN_STEP)
    if done == nil then sub:close() return nil, e end
  until done
  local entries = scan:entries()
  table.sort(entries, function(a, b) return a.path < b.path end)
  for _, e in ipairs(entries) do
    local sum
    if e.type == "file" then
      sum, err = hash_file(sub, e.path)
      if not sum then sub:close() return nil, err end
    end
    parts[#parts + 1] = entry_line(e.path == "" and src or (src .. "/" .. e.path), e, sum)
  end
  sub:close()
  return core.sha256_hex(table.concat(parts))
end

-- The sources of a COPY as a gzip tar in a temporary file (the host's tar; entries named as src
-- names them, relative to the context). → path | nil, err (TEMPLATE_FILES)
local function make_tar(context, src)
  local path = os.tmpname()
  local p, err = proc.spawn{ argv = { "tar", "-czf", path, "-C", context, "--", src }, max_buffer = 64 * 1024 }
  if not p then os.remove(path) return nil, files_err("COPY %s: cannot run tar: %s", src, err.message) end
  local out = {}
  while true do
    local chunk = p:read("stderr")
    if not chunk then break end
    if #out < 64 then out[#out + 1] = chunk end
  end
  local code, sig = p:wait()
  if code == nil then                               -- canceled (sig is the error): tar is not left running
    p:kill(9)
    p:close()
    os.remove(path)
    return nil, sig
  end
  p:close()
  if code ~= 0 then
    os.remove(path)
    local text = table.concat(out):gsub("%s+$", "")
    return nil, files_err("COPY %s: tar %s: %s", src, sig and sig ~= 0 and ("killed by signal " .. sig) or ("exited " .. tostring(code)), text)
  end
  return path
end

-- The status of a build → { status, logEntries, reason } | nil, err
local function status(api, tid, bid, offset)
  local res, err = api:_request("GET", ("/templates/%s/builds/%s/status?logsOffset=%d"):format(urlencode(tid), urlencode(bid), offset))
  if not res then return nil, err end
  local ok, v = pcall(cjson.decode, res.body)
  if not ok or type(v) ~= "table" or type(v.status) ~= "string" then
    return nil, errors.new("E2B_PROTOCOL", "template build status: the answer has no status")
  end
  if type(v.logEntries) ~= "table" then v.logEntries = {} end
  return v
end

local function nn(v) if v == cjson.null then return nil end return v end

local function log_entry(e)
  local step = nn(e.step)
  return { timestamp = nn(e.timestamp), level = nn(e.level) or "info", message = tostring(nn(e.message) or ""),
    step = math.tointeger(tonumber(step)) or step }
end

-- The TemplateBuildStartV2 body (JSON text: an empty steps list must stay a list).
local function start_body(d, hashes, force)
  local steps = {}
  for i, s in ipairs(d.steps) do
    local w = { type = s.type, args = s.args, force = s.force }
    if s.type == "COPY" then w.filesHash = hashes[i] end
    steps[i] = cjson.encode(w)
  end
  local top = { startCmd = d.start, readyCmd = d.ready, force = force }
  if d.image then top.fromImage = d.image else top.fromTemplate = d.from end
  local head = cjson.encode(top)
  return head:sub(1, -2) .. ',"steps":[' .. table.concat(steps, ",") .. "]}"
end

-- Builds description d (moonbox.template) as template o.name ("name" or "name:tag"). o: { name,
-- tags (the build's tags, E2B's; none: "default"), skipCache, onLogs = fn(entry), timeoutMs }.
-- entry: { timestamp, level, message, step (a step's number, "base", "finalize" or nil for
-- moonbox's own lines) }.
-- → { templateId, buildId, name, tags } | nil, err
function M.build(api, d, o)
  local err
  d, err = T.template(d)
  if not d then return nil, err end
  local name = o.name
  local function log(msg, level) if o.onLogs then o.onLogs({ timestamp = now_text(), level = level or "info", message = msg }) end end
  local deadline = sched.now() + (o.timeoutMs or DEFAULT_TIMEOUT_MS)
  -- every COPY's hash first: a missing source fails before anything is asked of the server
  local hashes = {}
  for i, s in ipairs(d.steps) do
    if s.type == "COPY" then
      local h, herr = M.files_hash(d.context or ".", s.src, s.dest)
      if not h then
        if herr.code == "TEMPLATE_FILES" and s.where then herr.message = s.where .. ": " .. herr.message end
        return nil, herr
      end
      hashes[i] = h
    end
  end
  log(("Requesting build for template: %s"):format(name))
  local res
  local req = { name = name, cpuCount = d.cpu, memoryMB = d.memoryMB }
  if o.tags and #o.tags > 0 then req.tags = { table.unpack(o.tags) } end   -- non-empty: a JSON array
  res, err = api:_request("POST", "/v3/templates", req)
  if not res then return nil, err end
  local ok, v = pcall(cjson.decode, res.body)
  if not ok or type(v) ~= "table" or type(v.templateID) ~= "string" or type(v.buildID) ~= "string" then
    return nil, errors.new("E2B_PROTOCOL", "POST /v3/templates: the answer lacks templateID or buildID")
  end
  local tid, bid = v.templateID, v.buildID
  local tags = type(v.tags) == "table" and v.tags or nil
  log(("Template created with ID: %s, Build ID: %s"):format(tid, bid))
  for i, s in ipairs(d.steps) do
    if s.type == "COPY" then
      res, err = api:_request("GET", ("/templates/%s/files/%s"):format(urlencode(tid), hashes[i]))
      if not res then return nil, err end
      local ok2, link = pcall(cjson.decode, res.body)
      if not ok2 or type(link) ~= "table" then return nil, errors.new("E2B_PROTOCOL", "template files link: not a JSON object") end
      local url = nn(link.url)
      if link.present == true and not s.force then
        log(("Skipping upload of '%s', already cached"):format(s.src))
      elseif type(url) ~= "string" then
        if link.present ~= true then return nil, errors.new("E2B_PROTOCOL", "template files link: neither present nor an upload url") end
        log(("Skipping upload of '%s', already cached"):format(s.src))
      else
        local tar, terr = make_tar(d.context or ".", s.src)
        if not tar then return nil, terr end
        -- the headers the server asks the upload to carry (E2B's signed storage URLs may), but its length
        local headers = {}
        for k, hv in pairs(type(nn(link.headers)) == "table" and link.headers or {}) do
          if type(k) == "string" and type(hv) == "string" and k:lower() ~= "content-length" then headers[k] = hv end
        end
        local up, uerr = http.request{ method = "PUT", url = url, body_file = tar, headers = headers, max_bytes = 64 * 1024,
          timeout_ms = UPLOAD_TIMEOUT_MS, ca_file = api.transport.ca_file, connect_to = api.transport.connect_to }
        os.remove(tar)
        if not up then return nil, uerr end
        if up.status < 200 or up.status > 299 then
          return nil, files_err("COPY %s: the upload was refused: HTTP %d: %s", s.src, up.status, (up.body or ""):sub(1, 500))
        end
        log(("Uploaded '%s'"):format(s.src))
      end
    end
  end
  log("All file uploads completed")
  log("Starting building...")
  res, err = api:_request("POST", ("/v2/templates/%s/builds/%s"):format(urlencode(tid), urlencode(bid)), start_body(d, hashes, d.skipCache or o.skipCache == true))
  if not res then return nil, err end
  local offset = 0
  while true do
    local st, serr = status(api, tid, bid, offset)
    if not st then return nil, serr end
    for _, e in ipairs(st.logEntries) do
      offset = offset + 1
      if o.onLogs then o.onLogs(log_entry(e)) end
    end
    if (st.status == "ready" or st.status == "error") and #st.logEntries == 0 then
      if st.status == "ready" then return { templateId = tid, buildId = bid, name = name, tags = tags } end
      local r = type(st.reason) == "table" and st.reason or {}
      local step = nn(r.step)
      step = math.tointeger(tonumber(step)) or step
      local s = math.type(step) == "integer" and d.steps[step] or nil
      local where = s and s.where or (step == "finalize" and d.where) or nil
      local logs = {}
      for k, e in ipairs(type(r.logEntries) == "table" and r.logEntries or {}) do logs[k] = log_entry(e) end
      local reason = tostring(nn(r.message) or "unknown error"):gsub("%s+$", "")
      local what
      if s then
        local text = T.describe_step(s)
        what = reason:sub(1, #text) == text and ("step %d"):format(step) or ("step %d (%s)"):format(step, text)
      else
        what = step == "finalize" and "the start command" or step == "base" and ("its base (%s)"):format(d.image or d.from) or "the build"
      end
      return nil, errors.new("TEMPLATE_BUILD_FAILED", ("%stemplate %s: %s failed: %s"):format(where and (where .. ": ") or "", name,
        what, reason), { step = step, where = where, reason = reason, logs = logs, templateId = tid, buildId = bid })
    end
    if #st.logEntries == 0 then
      if sched.now() >= deadline then
        return nil, errors.new("MB_TIMEOUT", ("template %s: the build did not end within %d ms (it may go on: build %s)"):format(name,
          o.timeoutMs or DEFAULT_TIMEOUT_MS, bid), { templateId = tid, buildId = bid })
      end
      local _, cerr = sched.sleep(POLL_MS)
      if cerr then return nil, cerr end
    end
  end
end

-- GET /templates → list of { templateId, names, buildStatus, public, cpuCount, memoryMB,
-- diskSizeMB, createdAt, updatedAt, envdVersion } | nil, err
function M.list(api)
  local res, err = api:_request("GET", "/templates")
  if not res then return nil, err end
  local ok, v = pcall(cjson.decode, res.body)
  if not ok or type(v) ~= "table" then return nil, errors.new("E2B_PROTOCOL", "GET /templates: not a JSON list") end
  local out = {}
  for i, t in ipairs(v) do
    if type(t) ~= "table" or type(t.templateID) ~= "string" then
      return nil, errors.new("E2B_PROTOCOL", "GET /templates: an entry without templateID")
    end
    local names = nn(t.names) or nn(t.aliases)
    local function int(x) x = nn(x) return math.tointeger(x) or x end
    out[i] = { templateId = t.templateID, names = type(names) == "table" and names or {}, buildStatus = nn(t.buildStatus),
      public = nn(t.public), cpuCount = int(t.cpuCount), memoryMB = int(t.memoryMB), diskSizeMB = int(t.diskSizeMB),
      createdAt = nn(t.createdAt), updatedAt = nn(t.updatedAt), envdVersion = nn(t.envdVersion) }
  end
  return out
end

-- DELETE /templates/{id or name} → true | false (not found) | nil, err
function M.delete(api, ref)
  local res, err = api:_request("DELETE", "/templates/" .. urlencode(ref))
  if res then return true end
  if err.code == "E2B_NOT_FOUND" then return false end
  return nil, err
end

-- The options of client:buildTemplate, strictly (a mistake raises at `level`).
function M.check_build_options(o, level)
  level = (level or 2) + 1
  if type(o) ~= "table" then error("e2b: buildTemplate: options must be a table { name, tags, skipCache, onLogs, timeoutMs }", level) end
  fields.only(o, M.BUILD_FIELDS, "e2b: buildTemplate", level)
  if type(o.name) ~= "string" or o.name == "" then error("e2b: buildTemplate: name must be a non-empty string", level) end
  if o.tags ~= nil then
    if type(o.tags) ~= "table" then error("e2b: buildTemplate: tags must be a list of strings", level) end
    for k, v in pairs(o.tags) do
      if math.type(k) ~= "integer" or k < 1 or k > #o.tags or type(v) ~= "string" or v == "" then
        error("e2b: buildTemplate: tags must be a list of non-empty strings", level)
      end
    end
  end
  if o.skipCache ~= nil and type(o.skipCache) ~= "boolean" then error("e2b: buildTemplate: skipCache must be a boolean", level) end
  if o.onLogs ~= nil and type(o.onLogs) ~= "function" then error("e2b: buildTemplate: onLogs must be a function", level) end
  if o.timeoutMs ~= nil and (type(o.timeoutMs) ~= "number" or o.timeoutMs ~= o.timeoutMs or o.timeoutMs <= 0) then
    error("e2b: buildTemplate: timeoutMs must be a positive number of milliseconds", level)
  end
end

return M
