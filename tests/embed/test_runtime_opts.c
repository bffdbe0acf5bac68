/* test_runtime_opts.c — mb_runtime_opts is versioned by its size: a caller compiled against an
 * older, smaller struct still makes a runtime (the fields beyond its size read as defaults), and
 * a size that cannot be right (0, smaller than the size field, larger than the library's
 * struct) is refused with a message naming it. Linked with libmoonbox.a as installed. */
#include "moonbox.h"
#include "mbtest.h"
#include <lauxlib.h>
#include <uv.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a caller compiled against a moonbox.h with only the first fields passes. */
struct opts_v0 {
  size_t size;
  uv_loop_t *loop;
};

/* The runtime's package.path (a copy; "" when it cannot be read). */
static char path_buf[8192];
static const char *package_path(mb_runtime *rt) {
  lua_State *L = mb_runtime_lua(rt);
  path_buf[0] = '\0';
  if (!L) return path_buf;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  const char *p = lua_tostring(L, -1);
  snprintf(path_buf, sizeof path_buf, "%s", p ? p : "");
  lua_pop(L, 2);
  return path_buf;
}

static void test_init(void) {
  mb_runtime_opts a = MB_RUNTIME_OPTS_INIT, b;
  memset(&b, 0xff, sizeof b);
  mb_runtime_opts_init(&b);
  CHECK_INT(a.size, sizeof(mb_runtime_opts));
  CHECK_INT(b.size, sizeof(mb_runtime_opts));
  CHECK(a.loop == NULL && b.loop == NULL);
  CHECK(a.lua_dir == NULL && b.lua_dir == NULL);
}

/* The current struct, and NULL for every default. */
static void test_current(void) {
  mb_runtime_opts o = MB_RUNTIME_OPTS_INIT;
  o.lua_dir = MB_SOURCE_DIR "/lua";
  mb_runtime *rt = NULL;
  CHECK_INT(mb_runtime_new(&o, &rt), MB_OK);
  CHECK_HAS(package_path(rt), MB_SOURCE_DIR "/lua/?.lua");
  mb_runtime_free(rt);
  rt = NULL;
  CHECK_INT(mb_runtime_new(NULL, &rt), MB_OK);   /* the modules through LUA_PATH (main) */
  CHECK_STR(mb_runtime_errcode(rt), "OK");
  mb_runtime_free(rt);
}

/* An older caller: its struct ends after loop. The loop is used, lua_dir is the default. */
static void test_older_caller(void) {
  uv_loop_t loop;
  CHECK_INT(uv_loop_init(&loop), 0);
  struct opts_v0 old = {sizeof old, &loop};
  mb_runtime *rt = NULL;
  int rc = mb_runtime_new((const mb_runtime_opts *)(const void *)&old, &rt);
  CHECK_INT(rc, MB_OK);
  if (rc != MB_OK) fprintf(stderr, "     %s\n", mb_runtime_errmsg(rt));
  CHECK(mb_runtime_loop(rt) == &loop);
  mb_runtime_free(rt);
  uv_run(&loop, UV_RUN_DEFAULT);   /* the runtime's handles finish closing on the borrowed loop */
  CHECK_INT(uv_loop_close(&loop), 0);
}

/* A field beyond the caller's size is never read, whatever the bytes there hold. */
static void test_fields_beyond_size_ignored(void) {
  mb_runtime_opts o = MB_RUNTIME_OPTS_INIT;
  o.lua_dir = "/nonexistent";   /* would fail the runtime if it were read */
  o.size = offsetof(mb_runtime_opts, lua_dir);
  mb_runtime *rt = NULL;
  int rc = mb_runtime_new(&o, &rt);
  CHECK_INT(rc, MB_OK);
  if (rc != MB_OK) fprintf(stderr, "     %s\n", mb_runtime_errmsg(rt));
  CHECK(strstr(package_path(rt), "/nonexistent") == NULL);
  mb_runtime_free(rt);
  /* A size that ends inside lua_dir does not make half of it the caller's. */
  o.size = offsetof(mb_runtime_opts, lua_dir) + 1;
  rt = NULL;
  CHECK_INT(mb_runtime_new(&o, &rt), MB_OK);
  CHECK(strstr(package_path(rt), "/nonexistent") == NULL);
  mb_runtime_free(rt);
}

static void refused(const mb_runtime_opts *o, const char *size_text) {
  mb_runtime *rt = NULL;
  CHECK_INT(mb_runtime_new(o, &rt), MB_E_INVALID);
  CHECK(rt != NULL);
  CHECK_STR(mb_runtime_errcode(rt), "E2B_INVALID");
  CHECK_HAS(mb_runtime_errmsg(rt), size_text);
  CHECK_HAS(mb_runtime_errmsg(rt), "MB_RUNTIME_OPTS_INIT");
  CHECK(mb_runtime_lua(rt) == NULL);
  CHECK_INT(mb_runtime_open(rt, "x.lua", NULL), MB_E_INVALID);   /* a failed runtime refuses */
  mb_runtime_free(rt);
}

static void test_bad_sizes(void) {
  mb_runtime_opts zeroed;
  memset(&zeroed, 0, sizeof zeroed);   /* zeroed, never initialized: size 0 */
  zeroed.lua_dir = MB_SOURCE_DIR "/lua";
  refused(&zeroed, "opts->size is 0,");
  mb_runtime_opts tiny = MB_RUNTIME_OPTS_INIT;
  tiny.size = sizeof(size_t) - 1;
  refused(&tiny, "not between");
  /* A caller's struct larger than this library's (a newer moonbox.h): refused, never read. */
  struct {
    mb_runtime_opts o;
    char newer_fields[64];
  } big;
  memset(&big, 0, sizeof big);
  big.o.size = sizeof big;
  char want[64];
  snprintf(want, sizeof want, "opts->size is %zu,", sizeof big);
  refused(&big.o, want);
  mb_runtime_opts garbage = MB_RUNTIME_OPTS_INIT;
  garbage.size = (size_t)-1;
  refused(&garbage, "no newer than the library");
}

int main(void) {
  setenv("LUA_PATH", MB_SOURCE_DIR "/lua/?.lua;" MB_SOURCE_DIR "/lua/?/init.lua;;", 1);
  MBT_RUN(test_init);
  MBT_RUN(test_current);
  MBT_RUN(test_older_caller);
  MBT_RUN(test_fields_beyond_size_ignored);
  MBT_RUN(test_bad_sizes);
  return mbt_report();
}
