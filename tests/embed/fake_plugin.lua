-- A plugin for tests/embed/test_runtime.c: no sandbox, records what happens to it in the
-- global `fake_log` so the C test can read it.
local M = { name = "fake", provides = "fake", inject = {} }
M.schema = { value = { type = "number", default = 7 } }

function M.new(ctx, config)
  _G.fake_log = (_G.fake_log or "") .. "new;"
  return { value = config.value, policies = ctx.policies,
    dispose = function() _G.fake_log = _G.fake_log .. "dispose;" return true end }
end

return M
