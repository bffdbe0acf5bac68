-- moonbox.workspace.plan — what a pull would do: the sandbox's tree against the base (what
-- changed since the push), then each change against the host (did the host change it too?).
-- Pure decisions; the host's answers come from the caller (moonbox.workspace does the I/O).
--
-- A change is { path, kind = "added" | "modified" | "deleted" | "mode", b = base record,
-- s = sandbox record (nil when deleted) }. Against the host H (lstat, false when absent):
--   H is what the base says      → "apply"  (the sandbox's change is brought over)
--   H is what the sandbox says   → "same"   (both made it: nothing to write)
--   otherwise                    → "conflict" — applied anyway with prefer = "sandbox",
--                                  left as it is with prefer = "host", else only reported.
local errors = require "moonbox.errors"
local manifest = require "moonbox.workspace.manifest"

local M = {}

local function parent(p) return p:match("^(.*)/[^/]*$") end

-- Is path below (or at) an entry the sandbox excluded (a rule matched: not descended)?
function M.excluded_at(path, excluded)
  local p = path
  while p do
    if excluded[p] then return true end
    p = parent(p)
  end
  return false
end

local function classify(b, s)
  if not b then return "added" end
  if not s then return "deleted" end
  if b.t ~= s.t then return "modified" end
  if s.t == "f" then
    if b.h ~= s.h then return "modified" end
    if b.m ~= s.m then return "mode" end
  elseif s.t == "l" then
    if b.l ~= s.l then return "modified" end
  elseif b.m ~= s.m then
    return "mode"
  end
  return nil
end
M.classify = classify

-- base entries, sandbox entries, sandbox exclusions → sorted list of changes | nil, err
function M.changes(base, sandbox, excluded)
  local out = {}
  for p, s in pairs(sandbox) do
    local kind = classify(base[p], s)
    if kind then
      if s.t == "f" and s.h == false and kind ~= "mode" then
        return nil, errors.new("SYNC_PERMISSION_DENIED", ("cannot read %q in the sandbox (it changed since the push)"):format(p),
          { path = p })
      end
      out[#out + 1] = { path = p, kind = kind, b = base[p], s = s }
    end
  end
  for p, b in pairs(base) do
    if sandbox[p] == nil and not M.excluded_at(p, excluded) then
      out[#out + 1] = { path = p, kind = "deleted", b = b }
    end
  end
  table.sort(out, function(x, y) return x.path < y.path end)
  return out
end

-- Does the host's entry H (lstat: false when absent) hold what record r says (nil: nothing)?
-- hash(): the host file's SHA-256, computed only when the version alone cannot tell.
-- → bool | nil, err
function M.host_matches(H, r, hash)
  if r == nil then return H == false end
  if not H then return false end
  if r.t == "d" then return H.type == "directory" and H.mode == r.m end
  if r.t == "l" then return H.type == "symlink" and H.link == r.l end
  if H.type ~= "file" or H.mode ~= r.m then return false end
  if r.v and H.version == r.v then return true end
  if H.size ~= r.s then return false end
  local h, err = hash()
  if not h then return nil, err end
  return h == r.h
end

-- A change against the host. → "apply" | "same" | "conflict", why (for a conflict) | nil, err
function M.decide(c, H, hash)
  local hb, err = M.host_matches(H, c.b, hash)
  if hb == nil then return nil, err end
  if hb then return "apply" end
  local hs, serr = M.host_matches(H, c.s, hash)
  if hs == nil then return nil, serr end
  if hs then return "same" end
  if c.b == nil then return "conflict", "added on the host too, differently" end
  if not H then return "conflict", "deleted on the host since the push" end
  return "conflict", "changed on the host since the push"
end

-- The entries of a fetched archive (core unpack items) against what was asked for (path →
-- change): every entry asked for, once, of the type the manifest said, none below a link of the
-- same archive, nothing missing. Sets c.item. → true | nil, err (SYNC_UNSAFE_ENTRY naming the
-- entry; SYNC_CHANGED when the world changed between its manifest and the archive)
function M.check_items(items, want)
  local links = {}
  for _, it in ipairs(items) do if it.type == "symlink" then links[it.path] = true end end
  local function fail(code, fmt, path) return nil, errors.new(code, fmt:format(path), { path = path }) end
  for _, it in ipairs(items) do
    local c = want[it.path]
    if not c then return fail("SYNC_UNSAFE_ENTRY", "the world sent %q, which was not asked for: refused", it.path) end
    if c.item then return fail("SYNC_UNSAFE_ENTRY", "the world sent %q twice: refused", it.path) end
    local p = parent(it.path)
    while p do
      if links[p] then
        return nil, errors.new("SYNC_UNSAFE_ENTRY", ("%q lies below %q, a symbolic link in the same archive: refused"):format(
          it.path, p), { path = it.path })
      end
      p = parent(p)
    end
    if it.type ~= (c.s.t == "f" and "file" or "symlink") then
      return fail("SYNC_CHANGED", "%q changed in the world while it was pulled (pull again)", it.path)
    end
    c.item = it
  end
  for path, c in pairs(want) do
    if not c.item then return fail("SYNC_CHANGED", "%q vanished in the world while it was pulled (pull again)", path) end
  end
  return true
end

M.same = manifest.same
return M
