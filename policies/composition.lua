-- policies/composition.lua — which plugins exist and in what order they load and dispose (the
-- shipped defaults; a policy file of your own sets any subset of these fields). A plugin is a
-- Lua module returning { name, provides, inject = {...}, schema, new(ctx, config) }. Every
-- plugin loads after the plugins providing what it injects; disposal is the reverse.
return {
  -- Plugin name (as written in a composition) → Lua module. Merged name by name over these
  -- defaults; `name = false` removes one.
  plugins = {
    e2b = "moonbox.e2b",
    fs = "moonbox.fs.e2b",
    subprocess = "moonbox.subprocess.e2b",
    ["fs-local"] = "moonbox.fs.local",
    ["subprocess-local"] = "moonbox.subprocess.local",
    -- consumers: written against the seams only, so they run on either provider family
    bash = "moonbox.consumers.bash",
    terminal = "moonbox.consumers.terminal",
    lsp = "moonbox.consumers.lsp",
    -- workspace sync (push/pull/diff) over whichever fs provider the composition has
    workspace = "moonbox.workspace",
  },

  -- Tie-break among plugins whose dependencies are all loaded: lower rank loads first; unranked
  -- plugins follow in file order. The owner has no dependencies, so it always comes first.
  rank = { e2b = 1, fs = 2, subprocess = 3, ["fs-local"] = 2, ["subprocess-local"] = 3 },
}
