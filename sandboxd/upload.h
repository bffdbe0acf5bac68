/* upload.h — the writing half of POST /files, apart from HTTP: files arrive as parts (multipart
 * through upload_part, an sd_part_cb; octet-stream through upload_begin_file + upload_write), each
 * into a private temporary file next to its target (same directory, `.<name>.upload-<random>`,
 * O_EXCL, the user's, the target's mode if it exists) that is renamed over the target only once
 * the part arrived whole, with its metadata. So a client that disconnects, a body over the limit
 * (counted in bytes written: it bounds gzip bombs too), a failed part or an abandoned upload
 * leave the old file intact and no temporary file behind. Paths resolve inside c's root only. */
#ifndef SANDBOXD_UPLOAD_H
#define SANDBOXD_UPLOAD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "paths.h"

#define UPLOAD_MAX_PARTS 1000
#define UPLOAD_MAX_PARTS_STR "1000"

typedef struct upload upload;

/* qpath: the ?path of the request (names the target of every part; else each part's filename).
 * metadata: set on every file (a reference is taken; may be NULL). limit: bytes written in all.
 * gz: the body was gzip (only the 413 message says so). NULL when out of memory. */
upload *upload_new(const fs_ctx *c, const char *qpath, json_t *metadata, uint64_t limit, bool gz);
/* multipart: every piece of every part, in order; off == 0 starts a part (sd_part_cb). Fields
 * other than "file" are ignored, like envd. 0, or 1 after a failure (status and message set). */
int upload_part(void *u, const char *name, const char *filename, const char *data, uint64_t off, size_t size);
/* octet-stream: one file at target, then its bytes. 0, or 1 after a failure. */
int upload_begin_file(upload *u, const char *target);
int upload_write(upload *u, const char *data, size_t len);
/* The current file arrived whole: metadata, then renamed over its target. 0 or 1. */
int upload_finish(upload *u);
void upload_abort(upload *u);              /* drops the current file (the target is untouched) */
int  upload_fail(upload *u, int status, const char *msg);   /* records a failure; returns 1 */
json_t *upload_results(const upload *u);   /* [{path, name, type, metadata?}] written (borrowed) */
size_t upload_files(const upload *u);
int  upload_status(const upload *u);       /* the HTTP status of the failure, 0 if none */
const char *upload_message(const upload *u);
void upload_free(upload *u);               /* aborts what is unfinished */
#endif
