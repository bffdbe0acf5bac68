/* volumes.h — persistent volumes, as E2B has them: a named directory tree that outlives sandboxes
 * and sandboxd restarts, mounted into sandboxes at creation (volumeMounts) and read and written
 * from outside through the volume content API. Each volume is <state_dir>/volumes/<id>; the
 * catalogue is <state_dir>/volumes.json (written whole, atomically, on every change).
 *
 * Every content path is a volume path ("/a/b", or relative to "/"): cleaned lexically like E2B
 * (".." never climbs above the volume's root), then resolved with openat2(RESOLVE_IN_ROOT) on the
 * volume's root, so no symlink leads out of it. Owners are ids inside the sandboxes (the id map
 * given to vol_init turns them into host ids). Thread-safe. */
#ifndef SANDBOXD_VOLUMES_H
#define SANDBOXD_VOLUMES_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define VOL_NAME_MAX 128
#define VOL_ID_LEN 36             /* a UUID, as E2B's */
#define VOL_TOKEN_LEN 40
#define VOL_MAX 1024              /* volumes in the catalogue */
#define VOL_MAX_DEPTH 10          /* ListDir depth, as E2B's */
#define VOL_MAX_LIST 100000       /* entries one listing returns */
/* E2B's defaults for what the content API creates. */
#define VOL_DEFAULT_ID 9090
#define VOL_DEFAULT_DIR_MODE 0777
#define VOL_DEFAULT_FILE_MODE 0666

typedef struct volume volume;

typedef struct {
  char id[VOL_ID_LEN + 1];
  char name[VOL_NAME_MAX + 1];
  char token[VOL_TOKEN_LEN + 1];
  int64_t created_ms;
} vol_info;

/* Inner id i (< count) is host id base + i: the sandboxes' user namespace map. */
typedef struct { uid_t uid_base; gid_t gid_base; uint32_t count; } vol_idmap;

/* Loads the catalogue, creating <state_dir>/volumes. 0, or -1 with err. */
int  vol_init(const char *state_dir, const vol_idmap *map, char *err, size_t errlen);
void vol_shutdown(void);            /* forgets the catalogue in memory (the files stay) */
/* The volumes' file system (st_dev): a sandbox's /files may act on files there (its mounts). */
dev_t vol_dev(void);

/* Control plane. Each returns 0 or an HTTP status with msg. */
int vol_create(const char *name, vol_info *out, char *msg, size_t msglen);   /* 400 bad or taken name */
vol_info *vol_list(size_t *n);                                                /* oldest first; free() */
int vol_get(const char *id, vol_info *out);                                   /* 0 or 404 */
int vol_delete(const char *id, char *msg, size_t msglen);                     /* 404; 409 while mounted */

/* A reference to a volume: by name for a mount (mounted: vol_delete refuses until vol_put), by id
 * and token for the content API (404 unknown id, 401 wrong token). NULL with *status and msg. */
volume *vol_mount(const char *name, int *status, char *msg, size_t msglen);
volume *vol_access(const char *id, const char *token, int *status, char *msg, size_t msglen);
void vol_mount_hold(volume *v);     /* one more mount of a volume already held */
void vol_unmount(volume *v);        /* ends a mount */
void vol_put(volume *v);            /* ends an access */
const char *vol_name(const volume *v);
const char *vol_dir(const volume *v);   /* its host directory, the mount's source */

/* Owners and mode a request asks for; each field only when its has_ flag is set. */
typedef struct { bool has_uid, has_gid, has_mode; uint32_t uid, gid, mode; } vol_attrs;

/* Content API: 0 and a VolumeEntryStat (or a listing) in *out, or an HTTP status with msg. */
int vol_stat(volume *v, const char *path, json_t **out, char *msg, size_t msglen);
int vol_list_dir(volume *v, const char *path, int depth, json_t **out, char *msg, size_t msglen);
int vol_make_dir(volume *v, const char *path, const vol_attrs *a, bool force, json_t **out, char *msg, size_t msglen);
int vol_update(volume *v, const char *path, const vol_attrs *a, json_t **out, char *msg, size_t msglen);
int vol_remove(volume *v, const char *path, char *msg, size_t msglen);
/* A regular file to read: *fd (O_RDONLY) and *size. */
int vol_open_file(volume *v, const char *path, int *fd, uint64_t *size, char *msg, size_t msglen);

/* Writing a file: into a private temporary file next to it, renamed over it (force) or into place
 * only if it does not exist (not force: 409 then) once every byte arrived. */
typedef struct vol_writer vol_writer;
vol_writer *vol_write_begin(volume *v, const char *path, const vol_attrs *a, bool force, int *status, char *msg, size_t msglen);
int vol_write(vol_writer *w, const void *data, size_t len, char *msg, size_t msglen);   /* 0 or 500 */
int vol_write_finish(vol_writer *w, json_t **out, char *msg, size_t msglen);   /* frees w */
void vol_write_abort(vol_writer *w);                                             /* frees w */
#endif
