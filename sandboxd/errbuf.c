/* errbuf.c — an error message written into its caller's buffer (see errbuf.h). */
#include "errbuf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool continues(unsigned char c) { return (c & 0xC0) == 0x80; }

/* A message of n bytes written into errlen: when it was cut, not inside a character. */
static void whole_chars(char *err, size_t errlen, int n) {
  if (n < 0 || (size_t)n < errlen || errlen == 0) return;
  size_t end = errlen - 1, lead = end;   /* err[end] is the NUL */
  while (lead > 0 && continues((unsigned char)err[lead - 1])) lead--;
  if (lead == 0) return;
  unsigned char c = (unsigned char)err[lead - 1];
  size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (end - (lead - 1) < need) err[lead - 1] = '\0';
}

int seterr(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  whole_chars(err, errlen, n);
  return -1;
}

int err_upto(const char *s, size_t max) {
  size_t n = strnlen(s, max);
  if (n == max)
    while (n > 0 && continues((unsigned char)s[n])) n--;   /* s[n] continues the character the cut splits */
  return (int)n;
}
