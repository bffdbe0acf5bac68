/* procfile — the small kernel files sandboxd reads and writes (/proc, cgroups): whole values in
 * one read or one write. A leaf: no sandboxd module below it. */
#ifndef SBX_PROCFILE_H
#define SBX_PROCFILE_H
#include <stddef.h>
#include <sys/types.h>

/* path's contents (at most cap - 1 bytes), NUL-terminated. 0 | -1 with errno */
int procfile_read(const char *path, char *buf, size_t cap);
/* s written in one write(2) to an existing path (the kernel takes a value whole or refuses it).
 * 0 | -1 with errno (EIO for a short write) */
int procfile_write(const char *path, const char *s);
/* s into a file opened with oflags (O_WRONLY | O_CREAT | O_EXCL …) and mode: 0, or -1 with errno
 * (EIO when it took only part). procfile_write is this with O_WRONLY. */
int procfile_put(const char *path, int oflags, mode_t mode, const char *s);

#endif
