/* lua_rpc.c — moonbox.core functions for envd's binary codec:
 *   core.rpc_encode(message, json_text) → protobuf bytes | nil, err
 *   core.rpc_decode(message, bytes [, max_bytes]) → json_text | nil, err
 *   core.rpc_method(path) → request message name, response message name (raises if unknown)
 *   core.rpc_send_input(pid, data [, pty]) → the protobuf SendInputRequest (raw bytes, no
 *     JSON or base64 on the way: stdin is the hot unary call)
 * `message` is a full name ("process.StartRequest"); the JSON side is the Connect JSON codec's
 * (lua-cjson on the Lua side), so one Lua table serves both codecs. */
#pragma GCC diagnostic ignored "-Wmissing-braces" /* protoc-c's *__INIT macros of oneof unions */
#include "envd/process.pb-c.h"
#include "lua_moonbox.h"
#include "rpc_json.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MB_RPC_MAX_DECODE (64u * 1024 * 1024) /* default cap of a decoded message */

static const ProtobufCMessageDescriptor *check_message(lua_State *L, int idx) {
  const char *name = luaL_checkstring(L, idx);
  const ProtobufCMessageDescriptor *d = mb_rpc_message(name);
  if (!d) luaL_argerror(L, idx, lua_pushfstring(L, "unknown envd message %s", name));
  return d;
}

static int push_packed(lua_State *L, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  luaL_Buffer b;
  uint8_t *p = (uint8_t *)luaL_buffinitsize(L, &b, n ? n : 1);
  protobuf_c_message_pack(m, p);
  luaL_pushresultsize(&b, n);
  return 1;
}

static int l_rpc_encode(lua_State *L) {
  const ProtobufCMessageDescriptor *d = check_message(L, 1);
  size_t len;
  const char *text = luaL_checklstring(L, 2, &len);
  json_error_t je;
  json_t *j = json_loadb(text, len, 0, &je);
  if (!j) return mb_lua_push_error(L, mb_errcode(MB_E_INVALID), je.text);
  struct mb_arena ar;
  if (mb_arena_init(&ar, MB_RPC_ARENA_FOR(len)) != MB_OK) {
    json_decref(j);
    return mb_lua_push_error(L, mb_errcode(MB_E_NOMEM), "out of memory");
  }
  ProtobufCMessage *m;
  struct mb_error err;
  int rc = mb_rpc_from_json(d, j, &ar, &m, &err);
  json_decref(j);
  if (rc) {
    mb_arena_free(&ar);
    return mb_lua_push_mberror(L, &err);
  }
  push_packed(L, m);
  mb_arena_free(&ar);
  return 1;
}

static int l_rpc_decode(lua_State *L) {
  const ProtobufCMessageDescriptor *d = check_message(L, 1);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  lua_Integer max = mb_lua_opt_arg_int(L, 3, "rpc_decode", "max_bytes", MB_RPC_MAX_DECODE, 1, UINT32_MAX);
  if (len > (size_t)max) {
    char msg[128];
    snprintf(msg, sizeof msg, "%s: a %zu-byte message exceeds %lld bytes", d->name, len, (long long)max);
    return mb_lua_push_error(L, mb_errcode(MB_E_TOO_LARGE), msg);
  }
  struct mb_arena ar;
  if (mb_arena_init(&ar, MB_RPC_ARENA_FOR(len)) != MB_OK) return mb_lua_push_error(L, mb_errcode(MB_E_NOMEM), "out of memory");
  ProtobufCMessage *m;
  struct mb_error err;
  if (mb_rpc_unpack(d, data, len, &ar, &m, &err)) {
    mb_arena_free(&ar);
    return mb_lua_push_mberror(L, &err);
  }
  json_t *j = mb_rpc_to_json(m);
  mb_arena_free(&ar);
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!text) return mb_lua_push_error(L, mb_errcode(MB_E_NOMEM), "out of memory");
  lua_pushstring(L, text);
  free(text);
  return 1;
}

static int l_rpc_method(lua_State *L) {
  const ProtobufCMessageDescriptor *in, *out;
  if (!mb_rpc_method(luaL_checkstring(L, 1), &in, &out))
    return luaL_argerror(L, 1, lua_pushfstring(L, "unknown envd method %s", lua_tostring(L, 1)));
  lua_pushstring(L, in->name);
  lua_pushstring(L, out->name);
  return 2;
}

static int l_rpc_send_input(lua_State *L) {
  lua_Integer pid = mb_lua_check_int(L, 1, "rpc_send_input", "pid", 1, UINT32_MAX);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  int pty = lua_toboolean(L, 3);
  Process__ProcessSelector sel = PROCESS__PROCESS_SELECTOR__INIT;
  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = (uint32_t)pid;
  Process__ProcessInput in = PROCESS__PROCESS_INPUT__INIT;
  ProtobufCBinaryData bytes = {len, (uint8_t *)(uintptr_t)data};
  if (pty) {
    in.input_case = PROCESS__PROCESS_INPUT__INPUT_PTY;
    in.pty = bytes;
  } else {
    in.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
    in.stdin = bytes;
  }
  Process__SendInputRequest req = PROCESS__SEND_INPUT_REQUEST__INIT;
  req.process = &sel;
  req.input = &in;
  return push_packed(L, &req.base);
}

void mb_lua_open_rpc(lua_State *L) {
  static const luaL_Reg fns[] = {
    {"rpc_encode", l_rpc_encode},
    {"rpc_decode", l_rpc_decode},
    {"rpc_send_input", l_rpc_send_input},
    {"rpc_method", l_rpc_method},
    {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
}
