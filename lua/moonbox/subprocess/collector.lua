-- moonbox.subprocess.collector — collect mode's reader: a bounded tail with whole-stream
-- offsets (kept in C by the process stream's tail ring), read without consuming, so independent
-- readers never steal each other's deltas. An optional spill file holds the whole stream.
local M = {}
local Collector = {}
Collector.__index = Collector

-- stream: anything with :read_from(kind, offset), :total(kind), :diag(); spill: { maxBytes,
-- path } | nil; h: the handle (its transport_error / settled / completed say whether the spill
-- can be trusted).
function M.new(stream, kind, spill, h)
  return setmetatable({ s = stream, kind = kind, spill = spill, h = h }, Collector)
end

-- Bytes of the stream so far (the whole stream, not just the tail).
function Collector:total() return self.s:total(self.kind) end

-- Is the spill file the whole stream so far? Not when the stream outgrew its cap, when mbwrap
-- reported removing it (its own stderr: the stream's diag()), when the transport broke, or
-- while `done` was settled by the drain grace before the stream completed.
function Collector:spillValid()
  local sp, h = self.spill, self.h
  if not sp or self.s:total(self.kind) > sp.maxBytes then return false end
  if self.s:diag():find("mbwrap: " .. self.kind .. " spill removed", 1, true) then return false end
  if h and (h.transport_error or (h.settled and not h.completed)) then return false end
  return true
end

-- → { text, nextOffset, lossy, spillPath? }
function Collector:readFrom(from)
  if from ~= nil and (type(from) ~= "number" or from < 0 or from ~= math.floor(from)) then
    error("readFrom: offset must be a whole number of bytes >= 0", 2)
  end
  local text, next_offset, lossy = self.s:read_from(self.kind, math.tointeger(from or 0))
  local r = { text = text, nextOffset = next_offset, lossy = lossy }
  if lossy and self:spillValid() then r.spillPath = self.spill.path end
  return r
end

M.Collector = Collector
return M
