/* errors.c — stable error codes and their text. */
#include "errors.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct { const char *code, *text; } mb_errtab[MB_E__COUNT] = {
  [MB_OK] = {"OK", "success"},
  [MB_E_NOMEM] = {"E2B_NOMEM", "out of memory"},
  [MB_E_INVALID] = {"E2B_INVALID", "invalid argument or input"},
  [MB_E_TOO_LARGE] = {"E2B_TOO_LARGE", "size limit exceeded"},
  [MB_E_TRUNCATED] = {"E2B_TRUNCATED", "input truncated"},
  [MB_E_PROTOCOL] = {"E2B_PROTOCOL", "protocol violation"},
  [MB_E_CONNECT_FAILED] = {"E2B_CONNECT_FAILED", "connection failed"},
  [MB_E_TIMEOUT] = {"E2B_TIMEOUT", "timed out"},
  [MB_E_TLS] = {"E2B_TLS", "TLS failure"},
  [MB_E_CANCELED] = {"MB_CANCELED", "canceled"},  /* the one cancellation code, as in Lua */
  [MB_E_HTTP] = {"E2B_HTTP", "unexpected HTTP status"},
  [MB_E_IO] = {"E2B_IO", "I/O error"},
  [MB_E_DNS] = {"E2B_DNS", "name resolution failed"},
  [MB_E_FAILED] = {"MB_FAILED", "failed with a moonbox error"},
  [MB_E_LUA] = {"MB_LUA", "a Lua error was raised"},
  [MB_E_BUSY] = {"MB_BUSY", "busy"},
};

const char *mb_strerror(int code) {
  if (code < 0 || code >= MB_E__COUNT) return "unknown error";
  return mb_errtab[code].text;
}

const char *mb_errcode(int code) {
  if (code < 0 || code >= MB_E__COUNT) return "E2B_UNKNOWN";
  return mb_errtab[code].code;
}

void mb_copy_text(char *dst, size_t cap, const char *src, size_t len) {
  if (cap == 0) return;
  if (len >= cap) {
    len = cap - 1;
    /* Back up over continuation bytes so a multi-byte sequence is not cut in half. */
    size_t k = len;
    while (k > 0 && ((unsigned char)src[k] & 0xC0) == 0x80) k--;
    if (len - k < 4) len = k;
  }
  memcpy(dst, src, len);
  dst[len] = '\0';
}

int mb_error_set(struct mb_error *err, int code, const char *fmt, ...) {
  if (!err) return code;
  err->code = code;
  char tmp[MB_ERROR_MSG_MAX * 2];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  size_t len = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
  mb_copy_text(err->message, sizeof err->message, tmp, len);
  return code;
}

void mb_error_clear(struct mb_error *err) {
  if (!err) return;
  err->code = MB_OK;
  err->message[0] = '\0';
}
