/* users.h — the accounts inside every sandbox: root (0, home /root) and user (1000, home
 * /home/user), as the template's /etc/passwd has them. */
#ifndef SANDBOXD_USERS_H
#define SANDBOXD_USERS_H
#include <sys/types.h>

#define USERS_DEFAULT "user"   /* envd's default user (no Authorization header, no username) */

/* 0 and the ids and home of `name`, or -1 for any other name (NULL included). */
int users_lookup(const char *name, uid_t *uid, gid_t *gid, const char **home);
#endif
