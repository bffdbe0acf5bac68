/* lua_egress.c — core.egress: sandboxd's egress decision (sandboxd/egress_rules.c, compiled into
 * the core), so that `moonbox policy network` explains with the code sandboxd enforces.
 *
 *   core.egress.parse{ internet = true, allowOut = {...}, denyOut = {...}, unblock = {...} }
 *       → rules | nil, err     err: E2B_INVALID_ARGUMENT, message as sandboxd words it (the wire's
 *       0-based `allowOut[2]: "10.0.0.0/33": ...`), and fields list ("allowOut", "denyOut",
 *       "unblock"), index (1-based), entry (as given), reason (the message after `list[i]: `).
 *       unblock: what sandboxd's --egress-unblock would be given (private, link-local, a CIDR).
 *   core.egress.decide(rules, { addr = "198.51.100.7", port = 443, proto = "tcp"|"udp", name =,
 *       host_local = false, resolved = false })
 *       → { verdict = "allow"|"allow-name"|"deny"|"need-name", list = "allowOut"|"denyOut"|nil,
 *           index = 1-based | nil, entry = the deciding entry | nil, why = "..." | nil }
 *       resolved: addr is an address a name allowed by name resolved to (the safe defaults only).
 *   core.egress.dns_allowed(rules, name) → boolean (may the sandbox's DNS answer name?)
 *   core.egress.classify(addr) → "public"|"private"|"link-local"|"special" | nil, err
 *   core.egress.hostname(s) → name, wildcard | nil, err: a host name or a "*.example.com"
 *       wildcard as sandboxd reads names (sniff_hostname: lower-cased, one trailing dot dropped;
 *       an address, a CIDR or a bare "*" is not one). name keeps the "*." of a wildcard;
 *       wildcard is a boolean. err: E2B_INVALID_ARGUMENT with the reason.
 * rules:decide(dest) and rules:dns_allowed(name) are the same functions. A wrong argument type,
 * an address that is not one (decide), a port outside 0..65535 or an unknown proto raise. */
#include "lua_moonbox.h"
#include "egress_rules.h"
#include "sniff.h"
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#define MB_EGRESS_MT "moonbox.egress_rules"

typedef struct {
  egress_rules rules;
  egress_site site;
  int live;
} lrules;

static int rules_gc(lua_State *L) {
  lrules *r = luaL_checkudata(L, 1, MB_EGRESS_MT);
  if (r->live) egress_rules_free(&r->rules);
  r->live = 0;
  return 0;
}

/* nil, err with the list, the 1-based index and the entry when the message names one. */
static int push_parse_error(lua_State *L, const char *msg, const char *list, size_t index, const char *entry) {
  mb_lua_push_error(L, "E2B_INVALID_ARGUMENT", msg);
  if (list) {
    lua_pushstring(L, list);
    lua_setfield(L, -2, "list");
    lua_pushinteger(L, (lua_Integer)index + 1);
    lua_setfield(L, -2, "index");
  }
  if (entry) {
    lua_pushstring(L, entry);
    lua_setfield(L, -2, "entry");
  }
  const char *reason = msg;
  const char *sep = list ? strstr(msg, "]: ") : NULL;
  if (sep) reason = sep + 3;
  lua_pushstring(L, reason);
  lua_setfield(L, -2, "reason");
  return 2;
}

/* The strings of the list at field `name` of table t (absent or nil: none). The list and the
 * pointer array (a userdata) stay on the stack, so the strings are anchored until the caller
 * returns. → 0, or -1 with nil, err pushed (an entry with NUL). Raises for wrong types. */
static int read_list(lua_State *L, int t, const char *name, const char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  int type = lua_getfield(L, t, name);
  if (type == LUA_TNIL) return 0;
  if (type != LUA_TTABLE) return luaL_error(L, "egress.parse: %s must be a list of strings", name);
  int list = lua_gettop(L);
  size_t len = (size_t)lua_rawlen(L, list);
  *n = len;
  if (len > EGRESS_MAX_ENTRIES) return 0; /* the parser refuses the count before reading entries */
  const char **v = lua_newuserdatauv(L, (len ? len : 1) * sizeof *v, 0);
  for (size_t i = 0; i < len; i++) {
    lua_rawgeti(L, list, (lua_Integer)i + 1);
    size_t sl;
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &sl) : NULL;
    if (!s) return luaL_error(L, "egress.parse: %s[%d] must be a string, got %s", name, (int)i + 1, luaL_typename(L, -1));
    lua_pop(L, 1); /* still held by the list, which is on the stack */
    if (strlen(s) != sl) {
      char msg[96];
      snprintf(msg, sizeof msg, "%s[%zu]: the entry contains NUL", name, i);
      push_parse_error(L, msg, name, i, NULL);
      return -1;
    }
    v[i] = s;
  }
  *out = v;
  return 0;
}

static int l_parse(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "internet");
  int internet = 1;
  if (!lua_isnil(L, -1)) {
    if (!lua_isboolean(L, -1)) return luaL_error(L, "egress.parse: internet must be a boolean");
    internet = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  const char **allow, **deny, **unblock;
  size_t na, nd, nu;
  if (read_list(L, 1, "allowOut", &allow, &na) != 0) return 2;
  if (read_list(L, 1, "denyOut", &deny, &nd) != 0) return 2;
  if (read_list(L, 1, "unblock", &unblock, &nu) != 0) return 2;
  if (nu > EGRESS_MAX_UNBLOCK) {
    char msg[64];
    snprintf(msg, sizeof msg, "unblock: at most %d ranges", EGRESS_MAX_UNBLOCK);
    return push_parse_error(L, msg, NULL, 0, NULL);
  }
  lrules *r = mb_lua_new_object(L, sizeof *r, 0, MB_EGRESS_MT);
  char err[512];
  for (size_t i = 0; i < nu; i++) {
    if (egress_site_unblock(&r->site, unblock[i], err, sizeof err) != 0) {
      char msg[600];
      snprintf(msg, sizeof msg, "unblock[%zu]: %s", i, err);
      return push_parse_error(L, msg, "unblock", i, unblock[i]);
    }
  }
  if (egress_rules_parse(&r->rules, internet, allow, na, deny, nd, err, sizeof err) != 0) {
    /* sandboxd's messages begin with `allowOut[i]: ` or `denyOut[i]: ` when they name an entry */
    char list[16];
    size_t idx = 0;
    int used = 0;
    if (sscanf(err, "%15[a-zA-Z][%zu]: %n", list, &idx, &used) == 2 && used > 0) {
      int is_allow = !strcmp(list, "allowOut"), is_deny = !strcmp(list, "denyOut");
      if ((is_allow && idx < na) || (is_deny && idx < nd))
        return push_parse_error(L, err, is_allow ? "allowOut" : "denyOut", idx, is_allow ? allow[idx] : deny[idx]);
    }
    return push_parse_error(L, err, NULL, 0, NULL);
  }
  r->live = 1;
  return 1;
}

static const char *VERDICTS[] = {"allow", "allow-name", "deny", "need-name"};

/* A name as sandboxd compares it: lower-case, no final dot. → 0, -1 too long */
static int normal_name(const char *s, size_t n, char *out) {
  if (n && s[n - 1] == '.') n--;
  if (n > EGRESS_NAME_MAX) return -1;
  for (size_t i = 0; i < n; i++) out[i] = (char)tolower((unsigned char)s[i]);
  out[n] = 0;
  return 0;
}

static void push_decision(lua_State *L, const egress_decision *d) {
  lua_createtable(L, 0, 5);
  lua_pushstring(L, VERDICTS[d->verdict]);
  lua_setfield(L, -2, "verdict");
  if (d->rule && d->list) {
    lua_pushstring(L, d->list == 'a' ? "allowOut" : "denyOut");
    lua_setfield(L, -2, "list");
    lua_pushinteger(L, (lua_Integer)d->index + 1);
    lua_setfield(L, -2, "index");
    lua_pushstring(L, d->rule->text);
    lua_setfield(L, -2, "entry");
  }
  if (d->why) {
    lua_pushstring(L, d->why);
    lua_setfield(L, -2, "why");
  }
}

static int l_decide(lua_State *L) {
  lrules *r = luaL_checkudata(L, 1, MB_EGRESS_MT);
  if (!r->live) return luaL_error(L, "egress.decide: the rules were freed");
  luaL_checktype(L, 2, LUA_TTABLE);
  egress_dest d;
  memset(&d, 0, sizeof d);
  lua_getfield(L, 2, "addr");
  const char *addr = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  if (!addr || egress_addr_parse(addr, &d.addr) != 0)
    return luaL_error(L, "egress.decide: addr must be an IPv4 or IPv6 address, got %s",
                      addr ? addr : luaL_typename(L, -1));
  lua_pop(L, 1);
  lua_getfield(L, 2, "port");
  lua_Integer port = 0;
  if (!lua_isnil(L, -1)) {
    int ok = 0;
    port = lua_tointegerx(L, -1, &ok);
    if (!ok || port < 0 || port > 65535) return luaL_error(L, "egress.decide: port must be an integer in 0..65535");
  }
  d.port = (uint16_t)port;
  lua_pop(L, 1);
  lua_getfield(L, 2, "proto");
  const char *proto = lua_isnil(L, -1) ? "tcp" : lua_tostring(L, -1);
  if (!proto || (strcmp(proto, "tcp") && strcmp(proto, "udp")))
    return luaL_error(L, "egress.decide: proto must be \"tcp\" or \"udp\"");
  d.proto = !strcmp(proto, "tcp") ? EGRESS_TCP : EGRESS_UDP;
  lua_pop(L, 1);
  char name[EGRESS_NAME_MAX + 1];
  lua_getfield(L, 2, "name");
  if (!lua_isnil(L, -1)) {
    size_t n;
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
    if (!s) return luaL_error(L, "egress.decide: name must be a string");
    if (strlen(s) != n || normal_name(s, n, name) != 0) return luaL_error(L, "egress.decide: name is not a host name");
    d.name = name;
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "host_local");
  d.host_local = lua_toboolean(L, -1);
  lua_getfield(L, 2, "resolved");
  int resolved = lua_toboolean(L, -1);
  lua_pop(L, 2);
  egress_decision dec = resolved ? egress_decide_resolved(&r->rules, &r->site, &d.addr, d.host_local)
                                 : egress_decide(&r->rules, &r->site, &d);
  push_decision(L, &dec);
  return 1;
}

static int l_dns_allowed(lua_State *L) {
  lrules *r = luaL_checkudata(L, 1, MB_EGRESS_MT);
  if (!r->live) return luaL_error(L, "egress.dns_allowed: the rules were freed");
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  char name[EGRESS_NAME_MAX + 1];
  if (strlen(s) != n || normal_name(s, n, name) != 0) {
    lua_pushboolean(L, 0); /* no such name can be asked for */
    return 1;
  }
  lua_pushboolean(L, egress_dns_allowed(&r->rules, name));
  return 1;
}

static int l_classify(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  egress_addr a;
  if (strlen(s) != n || egress_addr_parse(s, &a) != 0)
    return mb_lua_push_error(L, "E2B_INVALID_ARGUMENT", lua_pushfstring(L, "%s is not an IPv4 or IPv6 address", s));
  static const char *const CLASS[] = {"public", "private", "link-local", "special"};
  lua_pushstring(L, CLASS[egress_classify(&a)]);
  return 1;
}

static int l_hostname(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  int wild = n >= 2 && s[0] == '*' && s[1] == '.';
  const char *t = wild ? s + 2 : s;
  size_t tn = wild ? n - 2 : n;
  char name[SNIFF_NAME_MAX + 3];
  if (strlen(s) != n) return mb_lua_push_error(L, "E2B_INVALID_ARGUMENT", "a host name cannot contain NUL");
  if (n == 1 && s[0] == '*')
    return mb_lua_push_error(L, "E2B_INVALID_ARGUMENT", "a bare \"*\" is not a host name (write *.example.com)");
  if (sniff_hostname(t, tn, wild ? name + 2 : name) != 0) {
    egress_addr a;
    int is_addr = egress_addr_parse(s, &a) == 0 || strchr(s, '/') || strchr(s, ':');
    char msg[400];
    if (is_addr)
      snprintf(msg, sizeof msg, "\"%.80s\" is an address or a CIDR, not a host name", s);
    else
      snprintf(msg, sizeof msg, "\"%.80s\" is not a host name or a *.wildcard (labels of a-z, 0-9, '-' and '_', "
               "at most 253 characters, the last not all digits)", s);
    return mb_lua_push_error(L, "E2B_INVALID_ARGUMENT", msg);
  }
  if (wild) memcpy(name, "*.", 2);
  lua_pushstring(L, name);
  lua_pushboolean(L, wild);
  return 2;
}

void mb_lua_open_egress(lua_State *L) {
  static const luaL_Reg m[] = {{"decide", l_decide}, {"dns_allowed", l_dns_allowed}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", rules_gc}, {NULL, NULL}};
  mb_lua_new_class(L, MB_EGRESS_MT, m, meta);
  static const luaL_Reg f[] = {{"parse", l_parse}, {"decide", l_decide}, {"dns_allowed", l_dns_allowed},
                               {"classify", l_classify}, {"hostname", l_hostname}, {NULL, NULL}};
  lua_createtable(L, 0, 5);
  luaL_setfuncs(L, f, 0);
  lua_setfield(L, -2, "egress");
}
