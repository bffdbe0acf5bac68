/* lua_envdec.c — class `moonbox.envelope_decoder` (connect.h): Connect envelopes decoded as
 * they arrive.
 *   core.envelope_decoder(max_message) → decoder
 *   d:push(bytes) → list of { flags=, data=, end_stream=, error = {code=, message=}, metadata = { name = {values} } }
 *       | nil, err;  d:finish() → true | nil, err (a message cut short) */
#include "connect.h"
#include "lua_moonbox.h"
#include <stdint.h>

#define MB_ENVDEC_MT "moonbox.envelope_decoder"

static struct mb_envelope_decoder *mb_check_envdec(lua_State *L) { return mb_lua_check_handle(L, 1, MB_ENVDEC_MT, "envelope decoder"); }

static int l_envelope_decoder(lua_State *L) {
  lua_Integer max = mb_lua_check_int(L, 1, "envelope_decoder", "max_message", 1, UINT32_MAX);
  void **u = mb_lua_new_handle(L, 0, MB_ENVDEC_MT);
  *u = mb_envelope_decoder_new((size_t)max);
  if (!*u) return luaL_error(L, "out of memory");
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
  return mb_lua_push_result(L, mb_envelope_decoder_finish(d, &err), &err);
}

static int l_envdec_gc(lua_State *L) {
  mb_envelope_decoder_free(mb_lua_take_handle(L, 1, MB_ENVDEC_MT));
  return 0;
}

void mb_lua_open_envdec(lua_State *L) {
  static const luaL_Reg m[] = {{"push", l_envdec_push}, {"finish", l_envdec_finish}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_envdec_gc}, {NULL, NULL}};
  mb_lua_new_class(L, MB_ENVDEC_MT, m, meta);
  lua_pushcfunction(L, l_envelope_decoder);
  lua_setfield(L, -2, "envelope_decoder");
}
