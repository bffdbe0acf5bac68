-- The consumers are written against the seams only: no consumer module may require a provider
-- module (or anything outside the small shared core) or mention e2b, so swapping the providers
-- cannot need a change in them.
local ALLOWED = { moonbox = true, ["moonbox.errors"] = true, ["moonbox.text"] = true, ["moonbox.ids"] = true, ["moonbox.fields"] = true,
  cjson = true }

local function consumer_files()
  local files = {}
  local p = assert(io.popen("ls lua/moonbox/consumers/*.lua"))
  for f in p:lines() do files[#files + 1] = f end
  p:close()
  return files
end

describe("consumer isolation", function()
  it("finds the consumers", function()
    assert.is_true(#consumer_files() >= 3)
  end)

  for _, f in ipairs(consumer_files()) do
    it(f .. " requires only the shared core and never mentions e2b", function()
      local src = assert(io.open(f)):read("a")
      assert.is_nil(src:lower():find("e2b", 1, true), f .. " mentions e2b")
      local n = 0
      for name in src:gmatch("require%s*%(?%s*[\"']([^\"']+)[\"']") do
        n = n + 1
        assert.is_true(ALLOWED[name] == true, f .. " requires " .. name)
      end
      assert.is_true(n > 0)
      -- no require through a variable or a computed name
      for call in src:gmatch("require%s*%(?%s*([^%s\"'(])") do
        error(f .. " calls require with a computed name: " .. call)
      end
    end)
  end
end)
