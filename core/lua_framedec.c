/* lua_framedec.c — class `moonbox.frame_decoder` (frames.h): mbwrap's frame stream decoded as
 * it arrives.
 *   core.frame_decoder(max_line) → decoder
 *   d:push(bytes) → list of { kind=, data= | value= | errno=, message= } | nil, err
 *   d:finish() → true | nil, err (a frame cut short) */
#include "frames.h"
#include "lua_moonbox.h"

#define MB_FRAMEDEC_MT "moonbox.frame_decoder"

static struct mb_frame_decoder *mb_check_framedec(lua_State *L) { return mb_lua_check_handle(L, 1, MB_FRAMEDEC_MT, "frame decoder"); }

static int l_frame_decoder(lua_State *L) {
  lua_Integer max = mb_lua_check_int(L, 1, "frame_decoder", "max_line", 1, LUA_MAXINTEGER);
  void **u = mb_lua_new_handle(L, 0, MB_FRAMEDEC_MT);
  *u = mb_frame_decoder_new((size_t)max);
  if (!*u) return luaL_error(L, "out of memory");
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
  return mb_lua_push_result(L, mb_frame_decoder_finish(d, &err), &err);
}

static int l_framedec_gc(lua_State *L) {
  mb_frame_decoder_free(mb_lua_take_handle(L, 1, MB_FRAMEDEC_MT));
  return 0;
}

void mb_lua_open_framedec(lua_State *L) {
  static const luaL_Reg m[] = {{"push", l_framedec_push}, {"finish", l_framedec_finish}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_framedec_gc}, {NULL, NULL}};
  mb_lua_new_class(L, MB_FRAMEDEC_MT, m, meta);
  lua_pushcfunction(L, l_frame_decoder);
  lua_setfield(L, -2, "frame_decoder");
}
