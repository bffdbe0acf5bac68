/* ignore.h — gitignore rules, shared by the host core (workspace scans) and mbwrap (the
 * sandbox-side manifest walk), so that both sides decide exactly alike. Pure C11 over memory: no
 * I/O, every allocation counted against the caller's byte limit.
 *
 * Rules come in frames. A frame is a set of patterns (one per line, gitignore syntax) based at a
 * directory of the tree ("" = the root): the caller's own exclude list is a frame of kind
 * MB_IGNORE_CALLER, each .gitignore file met by a walk a frame of kind MB_IGNORE_FILE based at its
 * directory. A path is decided by the caller's frames first (the last matching pattern of the
 * last matching caller frame: a positive match excludes, whatever the files say), then by the file
 * frames from the deepest to the shallowest: the last matching pattern of the deepest frame that
 * has one wins (`!` re-includes). No match: included.
 *
 * Pattern syntax (gitignore(5)): blank lines and `#` comments are skipped; trailing spaces are
 * dropped unless escaped (`\ `), a trailing CR too; `!` negates; `\` escapes the next character
 * (`\#`, `\!`, `\*`); a trailing `/` matches directories only; a `/` at the start or in the middle
 * anchors the pattern to the frame's directory, otherwise it matches a name at any depth below it;
 * `*` matches within one path component, `?` one character, `[...]` a set (ranges, `!`/`^`
 * negation, POSIX classes such as `[:digit:]`); `**` as a whole component matches any number of
 * components: leading ("** then /x": at any depth), trailing ("x/ then **": everything inside,
 * one or more components) and in the middle (zero or more). A walk
 * never descends into an excluded directory, so nothing below it can be re-included. Matching is
 * case-sensitive and costs O(pattern × path) per pattern (no exponential backtracking). */
#ifndef MB_IGNORE_H
#define MB_IGNORE_H
#include <stddef.h>

enum { MB_IGNORE_CALLER = 1, MB_IGNORE_FILE = 2 };

typedef struct mb_ignore mb_ignore;

/* A rule set whose memory (patterns, bases, bookkeeping) stays within max_bytes.
 * → NULL when even the empty set does not fit or malloc fails. */
mb_ignore *mb_ignore_new(size_t max_bytes);
void mb_ignore_free(mb_ignore *ig);

/* Adds a frame: the patterns of `text` (len bytes, lines separated by LF) based at directory
 * `base` (blen bytes, relative, no leading or trailing '/'; "" = the root).
 * → 0, or -1: 1 = over max_bytes, 2 = out of memory (*why). Nothing is added on failure. */
int mb_ignore_push(mb_ignore *ig, const char *base, size_t blen, const char *text, size_t len, int kind,
                   int *why);
/* Frames pushed so far; mb_ignore_pop_to(ig, n) removes the frames pushed after the n first. */
size_t mb_ignore_depth(const mb_ignore *ig);
void mb_ignore_pop_to(mb_ignore *ig, size_t n);
/* Patterns kept (comments and blank lines are not counted). */
size_t mb_ignore_patterns(const mb_ignore *ig);

/* Is `path` (len bytes, relative to the root, '/'-separated, no leading '/') excluded?
 * is_dir: the entry is a directory. → 1 excluded, 0 included. */
int mb_ignore_match(const mb_ignore *ig, const char *path, size_t len, int is_dir);
#endif
