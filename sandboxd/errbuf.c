/* errbuf.c — an error message written into its caller's buffer (see errbuf.h). */
#include "errbuf.h"

#include <stdarg.h>
#include <stdio.h>

int seterr(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}
