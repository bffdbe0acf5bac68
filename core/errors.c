/* errors.c — the table of error codes (made from error_codes.def) and the one error type. */
#include "errors.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct { const char *name, *meaning, *modules; } mb_codetab[MB_CODE__COUNT] = {
  [MB_CODE_OK] = {"OK", "success", ""},
#define MB_ERROR(name, meaning, modules) [MB_CODE_##name] = {#name, meaning, modules},
#include "error_codes.def"
};

/* enum mb_err (moonbox_errors.h, public: its numbers never change) is the list's MB_ERRNO lines,
 * in order: each is in its place, and none is missing. */
#define MB_ERRNO(e, name, text, meaning, modules)                                                          \
  _Static_assert((int)MB_CODE_##name == (int)(e), #e ": error_codes.def's MB_ERRNO lines must follow enum mb_err");
#define MB_ERROR(name, meaning, modules)
#include "error_codes.def"
enum {
  MB_ERRNO_OK_,
#define MB_ERRNO(e, name, text, meaning, modules) MB_ERRNO_##name,
#define MB_ERROR(name, meaning, modules)
#include "error_codes.def"
  MB_ERRNO_COUNT_
};
_Static_assert((int)MB_ERRNO_COUNT_ == (int)MB_E__COUNT, "error_codes.def must list every code of enum mb_err");

const char *mb_code_name(int code) {
  if (code < 0 || code >= MB_CODE__COUNT) return "E2B_UNKNOWN";
  return mb_codetab[code].name;
}

const char *mb_code_meaning(int code) {
  if (code < 0 || code >= MB_CODE__COUNT) return "unknown error";
  return mb_codetab[code].meaning;
}

const char *mb_code_modules(int code) {
  if (code < 0 || code >= MB_CODE__COUNT) return "";
  return mb_codetab[code].modules;
}

/* mb_strerror's short texts (the list's meanings are longer). */
static const char *const mb_errtext[MB_E__COUNT] = {
  [MB_OK] = "success",
#define MB_ERRNO(e, name, text, meaning, modules) [e] = text,
#define MB_ERROR(name, meaning, modules)
#include "error_codes.def"
};

const char *mb_strerror(int code) {
  if (code < 0 || code >= MB_E__COUNT) return "unknown error";
  return mb_errtext[code];
}

const char *mb_errcode(int code) {
  if (code < 0 || code >= MB_E__COUNT) return mb_code_name(-1);
  return mb_code_name(code);
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

/* The one setter: everything but the path. */
static void set_v(struct mb_error *err, int code, int name, const char *fmt, va_list ap) {
  err->code = code;
  err->name = name;
  char tmp[MB_ERROR_MSG_MAX * 2];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  if (n < 0) n = 0;
  size_t len = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
  mb_copy_text(err->message, sizeof err->message, tmp, len);
}

int mb_error_set(struct mb_error *err, int code, const char *fmt, ...) {
  if (!err) return code;
  va_list ap;
  va_start(ap, fmt);
  set_v(err, code, MB_CODE_OK, fmt, ap);
  va_end(ap);
  err->path[0] = '\0';
  return code;
}

int mb_error_set_named(struct mb_error *err, int code, int name, const char *fmt, ...) {
  if (!err) return code;
  va_list ap;
  va_start(ap, fmt);
  set_v(err, code, name, fmt, ap);
  va_end(ap);
  err->path[0] = '\0';
  return code;
}

int mb_error_fail(struct mb_error *err, int name, const char *path, const char *fmt, ...) {
  if (!err) return -1;
  va_list ap;
  va_start(ap, fmt);
  set_v(err, name > MB_OK && name < MB_E__COUNT ? name : MB_E_FAILED, name, fmt, ap);
  va_end(ap);
  path = path ? path : "";
  mb_copy_text(err->path, sizeof err->path, path, strlen(path));
  return -1;
}

const char *mb_error_code(const struct mb_error *err) {
  if (!err) return "OK";
  if (err->name > MB_CODE_OK && err->name < MB_CODE__COUNT) return mb_code_name(err->name);
  return mb_errcode(err->code);
}

void mb_error_clear(struct mb_error *err) {
  if (!err) return;
  err->code = MB_OK;
  err->name = MB_CODE_OK;
  err->message[0] = '\0';
  err->path[0] = '\0';
}
