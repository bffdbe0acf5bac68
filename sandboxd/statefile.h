/* statefile.h — the files sandboxd keeps in its state directory across restarts (secrets,
 * snapshots, the template build cache and defaults, pulled images): read whole, written whole
 * through PATH.tmp (mode 0600), fsync, rename and a synced directory, so that a crash leaves the
 * old file or the new, never half of one. */
#ifndef SANDBOXD_STATEFILE_H
#define SANDBOXD_STATEFILE_H
#include <jansson.h>
#include <stddef.h>

/* *root: path's JSON (duplicate keys refused), NULL when there is no such file (0 either way);
 * -1 with err naming the path and where it stops being JSON. */
int statefile_load(const char *path, json_t **root, char *err, size_t errlen);
/* The array under `key` of a {"version": 1, key: [...]} catalogue, NULL when root is not one. */
json_t *statefile_v1_array(const json_t *root, const char *key);
/* text written to path atomically; -1 with err naming the file and why, path untouched. Once
 * renamed the write counts as done: a directory that cannot be synced then is said on stderr.
 * A leftover PATH.tmp (a write a crash interrupted) is replaced, never followed if a link. */
int statefile_write(const char *path, const char *text, char *err, size_t errlen);
/* root as JSON (json_dumps flags) written to path atomically, as statefile_write. */
int statefile_save(const char *path, const json_t *root, size_t flags, char *err, size_t errlen);
/* fsync of a directory: what was made, renamed or removed in it reaches the disk. 0 or -1 (errno). */
int statefile_sync_dir(const char *dir);
#endif
