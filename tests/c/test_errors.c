/* test_errors.c — stable error codes, their strings, and bounded messages. */
#include "errors.h"
#include "mbtest.h"

static void test_codes_are_stable(void) {
  CHECK_INT(MB_OK, 0);
  CHECK_STR(mb_errcode(MB_OK), "OK");
  CHECK_STR(mb_errcode(MB_E_TOO_LARGE), "E2B_TOO_LARGE");
  CHECK_STR(mb_errcode(MB_E_CONNECT_FAILED), "E2B_CONNECT_FAILED");
  CHECK_STR(mb_errcode(MB_E_TIMEOUT), "E2B_TIMEOUT");
  CHECK_STR(mb_errcode(MB_E_TLS), "E2B_TLS");
  CHECK_STR(mb_errcode(MB_E_CANCELED), "MB_CANCELED");
  CHECK_STR(mb_errcode(MB_E_PROTOCOL), "E2B_PROTOCOL");
  CHECK_STR(mb_errcode(MB_E_HTTP), "E2B_HTTP");
  CHECK_STR(mb_errcode(MB_E_IO), "E2B_IO");
  CHECK_STR(mb_errcode(MB_E_DNS), "E2B_DNS");
  CHECK_STR(mb_errcode(MB_E_TRUNCATED), "E2B_TRUNCATED");
  CHECK_STR(mb_errcode(MB_E_NOMEM), "E2B_NOMEM");
  CHECK_STR(mb_errcode(MB_E_INVALID), "E2B_INVALID");
  CHECK_STR(mb_errcode(MB_E_FAILED), "MB_FAILED");
  CHECK_STR(mb_errcode(MB_E_LUA), "MB_LUA");
  CHECK_STR(mb_errcode(MB_E_BUSY), "MB_BUSY");
}

static void test_every_code_distinct(void) {
  for (int i = 0; i < MB_E__COUNT; i++) {
    CHECK(mb_errcode(i) != NULL && mb_strerror(i) != NULL);
    for (int j = i + 1; j < MB_E__COUNT; j++) {
      CHECK(strcmp(mb_errcode(i), mb_errcode(j)) != 0);
      CHECK(strcmp(mb_strerror(i), mb_strerror(j)) != 0);
    }
  }
}

static void test_out_of_range(void) {
  CHECK_STR(mb_errcode(-1), "E2B_UNKNOWN");
  CHECK_STR(mb_errcode(MB_E__COUNT), "E2B_UNKNOWN");
  CHECK_STR(mb_strerror(9999), "unknown error");
}

static void test_error_set(void) {
  struct mb_error e;
  CHECK_INT(mb_error_set(&e, MB_E_TIMEOUT, "after %d ms", 250), MB_E_TIMEOUT);
  CHECK_INT(e.code, MB_E_TIMEOUT);
  CHECK_STR(e.message, "after 250 ms");
  CHECK_INT(mb_error_set(NULL, MB_E_IO, "dropped"), MB_E_IO);
  mb_error_clear(&e);
  CHECK_INT(e.code, MB_OK);
  CHECK_STR(e.message, "");
}

/* The list (error_codes.def): enum mb_err's codes first, with the same numbers and names. */
static void test_the_list(void) {
  for (int i = 0; i < MB_E__COUNT; i++) CHECK_STR(mb_code_name(i), mb_errcode(i));
  CHECK_STR(mb_code_name(MB_CODE_SYNC_CHANGED), "SYNC_CHANGED");
  CHECK_STR(mb_code_name(MB_CODE_MB_IO), "MB_IO");
  CHECK_STR(mb_code_name(MB_CODE__COUNT), "E2B_UNKNOWN");
  CHECK(strlen(mb_code_meaning(MB_CODE_SPAWN_FAILED)) > 0 && strlen(mb_code_modules(MB_CODE_SPAWN_FAILED)) > 0);
  for (int i = 1; i < MB_CODE__COUNT; i++)
    for (int j = i + 1; j < MB_CODE__COUNT; j++) CHECK(strcmp(mb_code_name(i), mb_code_name(j)) != 0);
}

/* One error type: a named code keeps the function's return value; a failure names a path. */
static void test_named_errors(void) {
  struct mb_error e = {0};
  CHECK_STR(mb_error_code(&e), "OK");
  CHECK_INT(mb_error_set_named(&e, MB_E_IO, MB_CODE_MB_IO, "kill: %s", "gone"), MB_E_IO);
  CHECK_INT(e.code, MB_E_IO);
  CHECK_STR(mb_error_code(&e), "MB_IO");
  CHECK_STR(e.message, "kill: gone");
  mb_error_set(&e, MB_E_IO, "plain");
  CHECK_STR(mb_error_code(&e), "E2B_IO");
  CHECK_INT(mb_error_fail(&e, MB_CODE_SYNC_CONFLICT, "a/b", "'%s' changed", "a/b"), -1);
  CHECK_INT(e.code, MB_E_FAILED);
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  CHECK_STR(e.path, "a/b");
  mb_error_fail(&e, MB_CODE_E2B_NOMEM, NULL, "out of memory");
  CHECK_INT(e.code, MB_E_NOMEM);
  CHECK_STR(e.path, "");
  CHECK_INT(mb_error_fail(NULL, MB_CODE_SYNC_NOMEM, "x", "dropped"), -1);
  mb_error_clear(&e);
  CHECK_STR(mb_error_code(&e), "OK");
}

static void test_long_message_is_bounded(void) {
  struct mb_error e;
  char big[1000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  mb_error_set(&e, MB_E_PROTOCOL, "%s", big);
  CHECK_INT(strlen(e.message), MB_ERROR_MSG_MAX - 1);
}

static void test_utf8_cut_on_boundary(void) {
  /* "é" is 2 bytes; the buffer holds 4 bytes of text. */
  char out[5];
  mb_copy_text(out, sizeof out, "aa\xc3\xa9\xc3\xa9", 6);
  CHECK_STR(out, "aa\xc3\xa9");
  mb_copy_text(out, sizeof out, "aaa\xc3\xa9", 5);
  CHECK_STR(out, "aaa"); /* would cut é in half */
  mb_copy_text(out, sizeof out, "abcd", 4);
  CHECK_STR(out, "abcd");
  mb_copy_text(out, sizeof out, "abcdef", 6);
  CHECK_STR(out, "abcd");
}

int main(void) {
  MBT_RUN(test_codes_are_stable);
  MBT_RUN(test_every_code_distinct);
  MBT_RUN(test_out_of_range);
  MBT_RUN(test_error_set);
  MBT_RUN(test_the_list);
  MBT_RUN(test_named_errors);
  MBT_RUN(test_long_message_is_bounded);
  MBT_RUN(test_utf8_cut_on_boundary);
  return mbt_report();
}
