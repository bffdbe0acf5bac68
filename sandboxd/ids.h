/* ids.h — random identifiers: sandbox ids, envd tokens, snapshot template and layer ids. */
#ifndef SANDBOXD_IDS_H
#define SANDBOXD_IDS_H
#include <stdbool.h>
#include <stddef.h>

/* n uniformly random characters of [a-z0-9] from getrandom, then a NUL (out holds n + 1).
 * 0, or -1 with errno. */
int ids_random(char *out, size_t n);
/* 1..max characters, every one of [a-z0-9]. */
bool ids_alnum(const char *s, size_t max);
#endif
