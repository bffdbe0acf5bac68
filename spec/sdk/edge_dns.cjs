// TEST-ONLY (spec/sdk/edge.test.mjs loads it into its child with NODE_OPTIONS=--require): the
// wildcard DNS record an E2B deployment has, `*.<MB_EDGE_DOMAIN>` → MB_EDGE_ADDR (the test's
// sandboxd), as node's dns.lookup answers for every connection net/tls/undici make. Any other
// name resolves as usual. Nothing of moonbox or sandboxd sees this file.
'use strict'
const dns = require('node:dns')
const domain = (process.env.MB_EDGE_DOMAIN || '').toLowerCase()
const addr = process.env.MB_EDGE_ADDR
if (!domain || !addr) throw new Error('edge_dns.cjs: MB_EDGE_DOMAIN and MB_EDGE_ADDR must be set')
const system = dns.lookup
dns.lookup = function lookup(hostname, options, callback) {
  if (typeof options === 'function') { callback = options; options = {} }
  if (typeof options === 'number') options = { family: options }
  const h = String(hostname).toLowerCase().replace(/\.$/, '')
  if (h === domain || h.endsWith('.' + domain)) {
    if (options && options.all) return process.nextTick(callback, null, [{ address: addr, family: 4 }])
    return process.nextTick(callback, null, addr, 4)
  }
  return system.call(dns, hostname, options, callback)
}
