-- Test-only PKI for the TLS specs (spec/tls_spec.lua, spec/edge/edge_spec.lua), with the openssl
-- CLI: a CA in a directory, and certificates it signs for given names (valid, or expired).
local M = {}

-- Runs a shell command; raises with its output when it fails.
function M.sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  assert(p:close(), "failed: " .. cmd .. "\n" .. out)
end
local sh = M.sh

-- A CA, and a certificate it signs for `names` (valid `days`, negative: already expired).
function M.pki(dir)
  sh(("openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=moonbox-test-ca -days 2 -keyout %s/ca.key -out %s/ca.pem")
    :format(dir, dir))
  local function cert(name, sans, days)
    local ext = ("%s/%s.ext"):format(dir, name)
    local f = assert(io.open(ext, "w"))
    f:write("subjectAltName=" .. sans .. "\n")
    f:close()
    sh(("openssl req -newkey rsa:2048 -nodes -subj /CN=%s -keyout %s/%s.key -out %s/%s.csr"):format(name, dir, name, dir, name))
    -- an expired certificate: signed now, valid for a day that ended yesterday (openssl x509
    -- cannot backdate; `ca` with explicit dates can)
    if days < 0 then
      sh(("mkdir -p %s/db && touch %s/db/index && echo 01 > %s/db/serial"):format(dir, dir, dir))
      local conf = ("%s/ca.cnf"):format(dir)
      local c = assert(io.open(conf, "w"))
      c:write(("[ca]\ndefault_ca=d\n[d]\ndir=%s\ndatabase=%s/db/index\nserial=%s/db/serial\nnew_certs_dir=%s/db\n"
        .. "default_md=sha256\npolicy=p\ncopy_extensions=copy\n[p]\ncommonName=supplied\n"):format(dir, dir, dir, dir))
      c:close()
      sh(("openssl ca -batch -config %s -cert %s/ca.pem -keyfile %s/ca.key -in %s/%s.csr -out %s/%s.pem "
        .. "-startdate 20200101000000Z -enddate 20200102000000Z -extfile %s"):format(conf, dir, dir, dir, name, dir, name, ext))
    else
      sh(("openssl x509 -req -in %s/%s.csr -CA %s/ca.pem -CAkey %s/ca.key -CAcreateserial -days %d -extfile %s -out %s/%s.pem")
        :format(dir, name, dir, dir, days, ext, dir, name))
    end
    return ("%s/%s.pem"):format(dir, name), ("%s/%s.key"):format(dir, name)
  end
  return cert
end


return M
