/* errors.h — the error codes of the whole C core.
 * Functions return 0 (MB_OK) or one of these codes; details travel in a struct mb_error.
 * The numbers and the strings of mb_errcode() are stable: Lua code branches on the strings. */
#ifndef MB_ERRORS_H
#define MB_ERRORS_H
#include <stddef.h>

enum mb_err {
  MB_OK = 0,
  MB_E_NOMEM,          /* allocation failed */
  MB_E_INVALID,        /* bad argument or malformed input (e.g. invalid base64) */
  MB_E_TOO_LARGE,      /* a caller-chosen limit was exceeded */
  MB_E_TRUNCATED,      /* input ended in the middle of a unit (envelope, frame line) */
  MB_E_PROTOCOL,       /* peer broke the protocol */
  MB_E_CONNECT_FAILED, /* could not connect */
  MB_E_TIMEOUT,        /* a deadline elapsed */
  MB_E_TLS,            /* TLS handshake or certificate failure */
  MB_E_CANCELED,       /* the caller canceled */
  MB_E_HTTP,           /* non-2xx status where success was required */
  MB_E_IO,             /* local I/O failure */
  MB_E_DNS,            /* name resolution failed */
  MB_E__COUNT
};

/* Human text for a code; never NULL. */
const char *mb_strerror(int code);
/* Stable identifier used in Lua ("E2B_TOO_LARGE", ...); never NULL. */
const char *mb_errcode(int code);

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
