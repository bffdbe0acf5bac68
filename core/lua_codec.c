/* lua_codec.c — moonbox.core codec functions: Connect envelopes, mbwrap frames, base64, sha256,
 * v1 signatures, Connect/HTTP code mapping. Operational failures return nil, err where err is
 * {code=, message=} with __tostring; bad arguments raise. */
#include "b64.h"
#include "connect.h"
#include "frames.h"
#include "lua_moonbox.h"
#include <stdint.h>
#include <string.h>

#define MB_ENVDEC_MT "moonbox.envelope_decoder"
#define MB_FRAMEDEC_MT "moonbox.frame_decoder"

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

struct mb_lua_envdec { struct mb_envelope_decoder *d; };

static struct mb_envelope_decoder *mb_check_envdec(lua_State *L) {
  struct mb_lua_envdec *u = luaL_checkudata(L, 1, MB_ENVDEC_MT);
  if (!u->d) luaL_error(L, "envelope decoder is closed");
  return u->d;
}

static int l_envelope_decoder(lua_State *L) {
  lua_Integer max = mb_lua_check_int(L, 1, "envelope_decoder", "max_message", 1, UINT32_MAX);
  struct mb_lua_envdec *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->d = NULL;
  luaL_setmetatable(L, MB_ENVDEC_MT);
  u->d = mb_envelope_decoder_new((size_t)max);
  if (!u->d) return luaL_error(L, "out of memory");
  return 1;
}

/* Pushes {name = {values...}} for end-stream metadata. */
static void mb_push_metadata(lua_State *L, json_t *md) {
  lua_createtable(L, 0, md ? (int)json_object_size(md) : 0);
  if (!md) return;
  const char *k;
  json_t *v;
  json_object_foreach(md, k, v) {
    lua_createtable(L, (int)json_array_size(v), 0);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
      lua_pushlstring(L, json_string_value(s), json_string_length(s));
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, k);
  }
}

/* Callback: appends one message table to the list at the top of the stack. */
static int mb_env_to_lua(void *ud, const struct mb_envelope *e) {
  lua_State *L = ud;
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, e->flags);
  lua_setfield(L, -2, "flags");
  lua_pushlstring(L, (const char *)e->data, e->len);
  lua_setfield(L, -2, "data");
  lua_pushboolean(L, e->end_stream);
  lua_setfield(L, -2, "end_stream");
  if (e->end_stream) {
    if (e->has_error) {
      lua_createtable(L, 0, 2);
      lua_pushstring(L, mb_connect_code_string(e->error.code));
      lua_setfield(L, -2, "code");
      lua_pushstring(L, e->error.message);
      lua_setfield(L, -2, "message");
      lua_setfield(L, -2, "error");
    }
    mb_push_metadata(L, e->metadata);
    lua_setfield(L, -2, "metadata");
  }
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  return 0;
}

static int l_envdec_push(lua_State *L) {
  struct mb_envelope_decoder *d = mb_check_envdec(L);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  lua_newtable(L);
  struct mb_error err;
  if (mb_envelope_decoder_push(d, s, len, mb_env_to_lua, L, &err)) return mb_lua_push_mberror(L, &err);
  return 1;
}

static int l_envdec_finish(lua_State *L) {
  struct mb_envelope_decoder *d = mb_check_envdec(L);
  struct mb_error err;
  if (mb_envelope_decoder_finish(d, &err)) return mb_lua_push_mberror(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_envdec_gc(lua_State *L) {
  struct mb_lua_envdec *u = luaL_checkudata(L, 1, MB_ENVDEC_MT);
  mb_envelope_decoder_free(u->d);
  u->d = NULL;
  return 0;
}

/* ---- frames ---- */

struct mb_lua_framedec { struct mb_frame_decoder *d; };

static struct mb_frame_decoder *mb_check_framedec(lua_State *L) {
  struct mb_lua_framedec *u = luaL_checkudata(L, 1, MB_FRAMEDEC_MT);
  if (!u->d) luaL_error(L, "frame decoder is closed");
  return u->d;
}

static int l_frame_decoder(lua_State *L) {
  lua_Integer max = mb_lua_check_int(L, 1, "frame_decoder", "max_line", 1, LUA_MAXINTEGER);
  struct mb_lua_framedec *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->d = NULL;
  luaL_setmetatable(L, MB_FRAMEDEC_MT);
  u->d = mb_frame_decoder_new((size_t)max);
  if (!u->d) return luaL_error(L, "out of memory");
  return 1;
}

static int mb_frame_to_lua(void *ud, const struct mb_frame *f) {
  lua_State *L = ud;
  lua_createtable(L, 0, 3);
  lua_pushstring(L, mb_frame_kind_name(f->kind));
  lua_setfield(L, -2, "kind");
  switch (f->kind) {
  case MB_FRAME_STDOUT: case MB_FRAME_STDERR:
    lua_pushlstring(L, (const char *)f->data, f->len);
    lua_setfield(L, -2, "data");
    break;
  case MB_FRAME_PGID: case MB_FRAME_EXIT: case MB_FRAME_SIGNAL:
    lua_pushinteger(L, f->value);
    lua_setfield(L, -2, "value");
    break;
  case MB_FRAME_SPAWN_ERROR:
    lua_pushinteger(L, f->value);
    lua_setfield(L, -2, "errno");
    lua_pushlstring(L, (const char *)f->data, f->len);
    lua_setfield(L, -2, "message");
    break;
  default: break;
  }
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  return 0;
}

static int l_framedec_push(lua_State *L) {
  struct mb_frame_decoder *d = mb_check_framedec(L);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  lua_newtable(L);
  struct mb_error err;
  if (mb_frame_decoder_push(d, s, len, mb_frame_to_lua, L, &err)) return mb_lua_push_mberror(L, &err);
  return 1;
}

static int l_framedec_finish(lua_State *L) {
  struct mb_frame_decoder *d = mb_check_framedec(L);
  struct mb_error err;
  if (mb_frame_decoder_finish(d, &err)) return mb_lua_push_mberror(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_framedec_gc(lua_State *L) {
  struct mb_lua_framedec *u = luaL_checkudata(L, 1, MB_FRAMEDEC_MT);
  mb_frame_decoder_free(u->d);
  u->d = NULL;
  return 0;
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

static const luaL_Reg mb_envdec_methods[] = {
  {"push", l_envdec_push}, {"finish", l_envdec_finish}, {NULL, NULL}};
static const luaL_Reg mb_framedec_methods[] = {
  {"push", l_framedec_push}, {"finish", l_framedec_finish}, {NULL, NULL}};

void mb_lua_open_codec(lua_State *L) {
  static const luaL_Reg envdec_meta[] = {{"__gc", l_envdec_gc}, {NULL, NULL}};
  static const luaL_Reg framedec_meta[] = {{"__gc", l_framedec_gc}, {NULL, NULL}};
  mb_lua_new_class(L, MB_ENVDEC_MT, mb_envdec_methods, envdec_meta);
  mb_lua_new_class(L, MB_FRAMEDEC_MT, mb_framedec_methods, framedec_meta);
  static const luaL_Reg fns[] = {
    {"envelope", l_envelope},
    {"envelope_decoder", l_envelope_decoder},
    {"frame_decoder", l_frame_decoder},
    {"b64encode", l_b64encode},
    {"b64decode", l_b64decode},
    {"sha256_hex", l_sha256_hex},
    {"sign_v1", l_sign_v1},
    {"connect_code_for_http", l_connect_code_for_http},
    {"http_status_for_connect", l_http_status_for_connect},
    {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
