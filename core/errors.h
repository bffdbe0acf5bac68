/* errors.h — the error codes of the whole C core.
 * Functions return 0 (MB_OK) or one of these codes; details travel in a struct mb_error.
 * The numbers and the strings of mb_errcode() are stable: Lua code branches on the strings. */
#ifndef MB_ERRORS_H
#define MB_ERRORS_H
#include <stddef.h>

/* The codes themselves (enum mb_err, mb_strerror, mb_errcode) are public: moonbox_errors.h. */
#include "moonbox_errors.h"

#define MB_ERROR_MSG_MAX 256

/* A code plus a bounded message; messages longer than the buffer are cut at a UTF-8 boundary. */
struct mb_error {
  int code;
  char message[MB_ERROR_MSG_MAX];
};

/* Sets code and formatted message; returns code so callers can `return mb_error_set(...)`.
 * err may be NULL (the message is then dropped). */
int mb_error_set(struct mb_error *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
void mb_error_clear(struct mb_error *err);
/* Copies at most cap-1 bytes of src (NUL-terminated) into dst without cutting a UTF-8 sequence. */
void mb_copy_text(char *dst, size_t cap, const char *src, size_t len);
#endif
