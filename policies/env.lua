-- policies/env.lua — which environment a sandboxed program gets (the shipped defaults).
--
-- The sandbox's ambient login environment is captured once per sandbox; these rules are
-- applied on the host for every spawn and terminal, and the result is sent with the spawn. The
-- rules are asked in the order below and the first that matches a name decides. A spawn's own
-- `env` entries always win: a string sets the name, `false` deletes it. The API key never
-- enters the sandbox (it is not part of the sandbox's environment to begin with).
--
-- A policy file of your own sets any subset of these fields; it is merged over this one and
-- checked when it is loaded. Try it without a sandbox:
--   moonbox policy env --policy env=./my-env.lua --from-host
return {
  -- Names kept whatever the rules below say (exact, case-sensitive).
  keep_names = {},

  -- Names always dropped (exact, case-sensitive).
  drop_names = {},

  -- Names starting with one of these are dropped (case-insensitive).
  drop_prefixes = { "DSH_" },

  -- Names containing one of these are dropped (case-insensitive): KEYBOARD and MONKEY too.
  sensitive_words = { "KEY", "PASSWORD", "SECRET", "TOKEN" },

  -- Names matching one of these Lua patterns are dropped (case-sensitive), e.g. "^AWS_".
  drop_patterns = {},
}
