/* errors.h — the error codes of the whole C core and the one error type, struct mb_error.
 * Functions return 0 (MB_OK) or one of enum mb_err's codes; details travel in a struct mb_error.
 * Every code moonbox has, C's and Lua's, is listed once in error_codes.def: enum mb_code below
 * is made from it (its first codes are enum mb_err's, with the same numbers), so is the table of
 * mb_errcode(). The names are stable: Lua code branches on them. */
#ifndef MB_ERRORS_H
#define MB_ERRORS_H
#include <stddef.h>

/* The codes of the C interfaces (enum mb_err, mb_strerror, mb_errcode) are public: moonbox_errors.h. */
#include "moonbox_errors.h"

/* Every code of error_codes.def: MB_CODE_OK (0), then MB_CODE_E2B_NOMEM == MB_E_NOMEM, ... in
 * enum mb_err's order, then the others (MB_CODE_SYNC_CHANGED, ...). */
enum mb_code {
  MB_CODE_OK = 0,
#define MB_ERROR(name, meaning, modules) MB_CODE_##name,
#include "error_codes.def"
  MB_CODE__COUNT
};

/* A code's name ("SYNC_CHANGED"), its meaning and the modules that raise it, as the list says;
 * "OK" / "success" for MB_CODE_OK; "E2B_UNKNOWN" / "unknown error" out of range. */
const char *mb_code_name(int code);
const char *mb_code_meaning(int code);
const char *mb_code_modules(int code);

#define MB_ERROR_MSG_MAX 256
#define MB_ERROR_PATH_MAX 1024

/* The one error type of the C core: a code, a bounded message (cut at a UTF-8 boundary), and the
 * path concerned where there is one (workspace sync). Zeroed: no error. */
struct mb_error {
  int code;     /* enum mb_err: what the failing function returned (MB_E_FAILED for `name`'s) */
  int name;     /* enum mb_code: its moonbox code when that is not mb_errcode(code) (e.g.
                   MB_CODE_SYNC_CHANGED, MB_CODE_MB_IO); MB_CODE_OK: mb_errcode(code) */
  char message[MB_ERROR_MSG_MAX];
  char path[MB_ERROR_PATH_MAX]; /* "" none */
};

/* Sets code and formatted message (name and path cleared); returns code so callers can
 * `return mb_error_set(...)`. err may be NULL (the message is then dropped). */
int mb_error_set(struct mb_error *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
/* The same, naming the error with a code of the list (`name`, enum mb_code) while the function
 * still returns `code` (e.g. MB_E_IO that Lua sees as MB_IO); returns code. */
int mb_error_set_named(struct mb_error *err, int code, int name, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;
/* A failure with a code of the list about `path` (NULL: none): code becomes MB_E_FAILED (or
 * `name` itself when it is one of enum mb_err's). Returns -1, the convention of the functions
 * that use it (workspace sync). err may be NULL. */
int mb_error_fail(struct mb_error *err, int name, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;
/* The error's moonbox code: its name's, else mb_errcode(code) ("OK" when none). */
const char *mb_error_code(const struct mb_error *err);
void mb_error_clear(struct mb_error *err);
/* Copies at most cap-1 bytes of src (NUL-terminated) into dst without cutting a UTF-8 sequence. */
void mb_copy_text(char *dst, size_t cap, const char *src, size_t len);
#endif
