/* errbuf.h — an error message written into its caller's buffer. A leaf. */
#ifndef SANDBOXD_ERRBUF_H
#define SANDBOXD_ERRBUF_H
#include <stddef.h>

/* fmt formatted into err[errlen], cut to fit and never inside a UTF-8 character (a message may go
 * into a JSON reply, which carries UTF-8 only); nothing written when errlen is 0. Returns -1, so
 * a function that fails with -1 can `return seterr(err, errlen, ...)`; others ignore it. */
__attribute__((format(printf, 3, 4))) int seterr(char *err, size_t errlen, const char *fmt, ...);
/* How many bytes of s a message shows ("%.*s"), at most max: cut where a character starts. */
int err_upto(const char *s, size_t max);
#endif
