/* moonbox_errors.h — the error codes of moonbox's C interfaces (public, self-contained).
 * Functions return 0 (MB_OK) or one of these. The numbers and the strings of mb_errcode() are
 * stable: Lua code sees the same strings ("E2B_TIMEOUT", "MB_CANCELED", ...). */
#ifndef MOONBOX_ERRORS_H
#define MOONBOX_ERRORS_H

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
  MB_E_FAILED,         /* an operation failed with a moonbox error: its own code is given apart
                          (mb_runtime_errcode, mb_task_errcode), e.g. COMPOSE_INVALID */
  MB_E_LUA,            /* Lua code raised (a bug in a script): the message has the traceback */
  MB_E_BUSY,           /* not now: already open, still running, or inside the loop's callbacks */
  MB_E__COUNT
};

/* Human text for a code; never NULL. */
const char *mb_strerror(int code);
/* Stable identifier used in Lua ("E2B_TOO_LARGE", ...); never NULL. */
const char *mb_errcode(int code);
#endif
