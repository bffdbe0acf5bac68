/* lua_codec.c — moonbox.core codec functions: Connect envelopes, base64, sha256, v1
 * signatures, Connect/HTTP code mapping (the decoders are classes of their own: lua_envdec.c,
 * lua_framedec.c). Operational failures return nil, err where err is
 * {code=, message=} with __tostring; bad arguments raise. */
#include "b64.h"
#include "connect.h"
#include "frames.h"
#include "lua_moonbox.h"
#include <stdint.h>
#include <string.h>

/* ---- envelopes ---- */

static int l_envelope(lua_State *L) {
  lua_Integer flags = mb_lua_check_int(L, 1, "envelope", "flags", 0, 255);
  size_t len;
  const char *payload = luaL_checklstring(L, 2, &len);
  unsigned char hdr[MB_ENVELOPE_HDR];
  if (mb_envelope_header(hdr, (uint8_t)flags, len))
    return mb_lua_push_error(L, mb_errcode(MB_E_TOO_LARGE), "envelope payload exceeds 4 GiB");
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, (const char *)hdr, sizeof hdr);
  luaL_addlstring(&b, payload, len);
  luaL_pushresult(&b);
  return 1;
}

/* ---- base64, sha256, signatures ---- */

static int l_b64encode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  size_t n = mb_b64_encoded_len(len);
  if (len && !n) return luaL_error(L, "string too large to encode");
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, n + 1);
  mb_b64_encode(s, len, out);
  luaL_pushresultsize(&b, n);
  return 1;
}

static int l_b64decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int tolerant = lua_toboolean(L, 2);
  size_t cap = mb_b64_decoded_max(len), out_len = 0;
  const char *why = NULL;
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, cap);
  int rc = tolerant ? mb_b64_decode_tolerant(s, len, out, cap, &out_len, &why)
                    : mb_b64_decode(s, len, out, cap, &out_len, &why);
  if (rc) {
    luaL_pushresultsize(&b, 0);
    lua_pop(L, 1);
    return mb_lua_push_error(L, mb_errcode(rc), why ? why : mb_strerror(rc));
  }
  luaL_pushresultsize(&b, out_len);
  return 1;
}

static int l_sha256_hex(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  char hex[2 * MB_SHA256_LEN + 1];
  mb_sha256_hex(s, len, hex);
  lua_pushstring(L, hex);
  return 1;
}

static int l_sign_v1(lua_State *L) {
  const char *path = luaL_checkstring(L, 1), *op = luaL_checkstring(L, 2);
  const char *user = luaL_checkstring(L, 3), *token = luaL_checkstring(L, 4);
  lua_Integer exp = luaL_optinteger(L, 5, 0);
  char sig[MB_SIGN_V1_LEN + 1];
  int rc = mb_sign_v1(path, op, user, token, (int64_t)exp, sig);
  if (rc) return mb_lua_push_error(L, mb_errcode(rc), mb_strerror(rc));
  lua_pushstring(L, sig);
  return 1;
}

static int l_connect_code_for_http(lua_State *L) {
  lua_Integer status = luaL_checkinteger(L, 1);
  int st = status < 0 || status > 999 ? 0 : (int)status;
  lua_pushstring(L, mb_connect_code_string(mb_connect_code_for_http(st)));
  return 1;
}

static int l_http_status_for_connect(lua_State *L) {
  const char *code = luaL_checkstring(L, 1);
  int c = mb_connect_code_from_string(code);
  luaL_argcheck(L, c != 0, 1, "not a Connect error code");
  lua_pushinteger(L, mb_connect_http_status(c));
  return 1;
}

void mb_lua_open_codec(lua_State *L) {
  static const luaL_Reg fns[] = {
    {"envelope", l_envelope},
    {"b64encode", l_b64encode},
    {"b64decode", l_b64decode},
    {"sha256_hex", l_sha256_hex},
    {"sign_v1", l_sign_v1},
    {"connect_code_for_http", l_connect_code_for_http},
    {"http_status_for_connect", l_http_status_for_connect},
    {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
