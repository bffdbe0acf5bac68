/* ignore.c — gitignore rules (see ignore.h). Shared by moonbox.core and mbwrap (musl, static):
 * C11 and string.h/stdlib.h only.
 *
 * A pattern is normalized once, when it is added, into '/'-separated components: a pattern that
 * is not anchored gets a leading "**" component (a name at any depth), a trailing "**" becomes
 * "*" + "**" (one or more components). Matching then runs the classic greedy wildcard algorithm
 * twice over: over the path's components, with "**" as the star and one component matched by a
 * component glob; and inside a component, with '*' as the star. Either loop backtracks only to
 * its last star, so a match costs O(pattern × path). */
#include "ignore.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PAT_NEGATE 1
#define PAT_DIRONLY 2

struct pat {
  char *text;  /* normalized: components separated by '/', escapes kept */
  size_t len;
  int flags;
};

struct frame {
  int kind;
  char *base;
  size_t blen;
  struct pat *pats;
  size_t npats;
  size_t bytes; /* what this frame costs, given back when it is popped */
};

struct mb_ignore {
  size_t max_bytes, used;
  struct frame *frames;
  size_t nframes, cap;
  size_t npatterns;
};

mb_ignore *mb_ignore_new(size_t max_bytes) {
  if (max_bytes < sizeof(mb_ignore)) return NULL;
  mb_ignore *ig = calloc(1, sizeof *ig);
  if (!ig) return NULL;
  ig->max_bytes = max_bytes;
  ig->used = sizeof *ig;
  return ig;
}

static void frame_free(struct frame *f) {
  for (size_t i = 0; i < f->npats; i++) free(f->pats[i].text);
  free(f->pats);
  free(f->base);
}

void mb_ignore_free(mb_ignore *ig) {
  if (!ig) return;
  for (size_t i = 0; i < ig->nframes; i++) frame_free(&ig->frames[i]);
  free(ig->frames);
  free(ig);
}

size_t mb_ignore_depth(const mb_ignore *ig) { return ig->nframes; }
size_t mb_ignore_patterns(const mb_ignore *ig) { return ig->npatterns; }

void mb_ignore_pop_to(mb_ignore *ig, size_t n) {
  while (ig->nframes > n) {
    struct frame *f = &ig->frames[--ig->nframes];
    ig->used -= f->bytes;
    ig->npatterns -= f->npats;
    frame_free(f);
  }
}

/* ---- parsing ---- */

/* Is the byte at i escaped (preceded by an odd number of backslashes)? */
static int escaped(const char *s, size_t i) {
  size_t n = 0;
  while (i > n && s[i - 1 - n] == '\\') n++;
  return n % 2 == 1;
}

/* One line → a normalized pattern in out (cap ≥ 2 * len + 8). → its length, 0 = no pattern. */
static size_t normalize(const char *line, size_t len, char *out, int *flags) {
  *flags = 0;
  if (len && line[len - 1] == '\r') len--;
  while (len && line[len - 1] == ' ' && !escaped(line, len - 1)) len--;
  if (len == 0 || line[0] == '#') return 0;
  size_t i = 0;
  if (line[0] == '!') {
    *flags |= PAT_NEGATE;
    i = 1;
  }
  if (len > i && line[len - 1] == '/' && !escaped(line, len - 1)) {
    *flags |= PAT_DIRONLY;
    while (len > i && line[len - 1] == '/' && !escaped(line, len - 1)) len--;
  }
  if (len <= i) return 0;
  /* Anchored when a separator remains (leading or in the middle). */
  int anchored = memchr(line + i, '/', len - i) != NULL;
  while (i < len && line[i] == '/') i++;
  if (i >= len) return 0;
  size_t o = 0;
  if (!anchored) {
    memcpy(out, "**/", 3);
    o = 3;
  }
  /* Copy, dropping empty components ("a//b" is "a/b"). */
  for (; i < len; i++) {
    if (line[i] == '/' && (o == 0 || out[o - 1] == '/')) continue;
    out[o++] = line[i];
  }
  while (o && out[o - 1] == '/') o--;
  if (o == 0) return 0;
  /* A trailing "**" after other components: one or more components ("*" then "**"). */
  if (o >= 3 && memcmp(out + o - 3, "/**", 3) == 0) {
    memcpy(out + o - 2, "*/**", 4);
    o += 2;
  }
  return o;
}

int mb_ignore_push(mb_ignore *ig, const char *base, size_t blen, const char *text, size_t len, int kind,
                   int *why) {
  int dummy;
  if (!why) why = &dummy;
  *why = 0;
  struct frame f = {.kind = kind};
  size_t bytes = sizeof(struct frame) + blen + 1;
  char *tmp = NULL;
  size_t tcap = 0;
  if (ig->nframes == ig->cap) {
    size_t nc = ig->cap ? ig->cap * 2 : 8;
    bytes += (nc - ig->cap) * sizeof(struct frame);
    if (ig->used + bytes > ig->max_bytes) goto too_big;
    struct frame *nf = realloc(ig->frames, nc * sizeof *nf);
    if (!nf) goto nomem;
    ig->frames = nf;
    ig->used += (nc - ig->cap) * sizeof(struct frame);
    bytes -= (nc - ig->cap) * sizeof(struct frame);
    ig->cap = nc;
  }
  if (ig->used + bytes > ig->max_bytes) goto too_big;
  f.base = malloc(blen + 1);
  if (!f.base) goto nomem;
  memcpy(f.base, base, blen);
  f.base[blen] = 0;
  f.blen = blen;
  size_t cap = 0;
  for (size_t pos = 0; pos < len;) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
    const char *line = text + pos;
    pos += ll + (nl ? 1 : 0);
    if (ll == 0) continue;
    if (2 * ll + 8 > tcap) {
      size_t want = 2 * ll + 8;
      if (ig->used + bytes + want > ig->max_bytes) goto too_big;
      char *nt = realloc(tmp, want);
      if (!nt) goto nomem;
      tmp = nt;
      tcap = want;
    }
    int flags;
    size_t n = normalize(line, ll, tmp, &flags);
    if (n == 0) continue;
    size_t need = n + 1 + (f.npats == cap ? (cap ? cap : 8) * sizeof(struct pat) : 0);
    if (ig->used + bytes + need > ig->max_bytes) goto too_big;
    if (f.npats == cap) {
      size_t nc = cap ? cap * 2 : 8;
      struct pat *np = realloc(f.pats, nc * sizeof *np);
      if (!np) goto nomem;
      f.pats = np;
      bytes += (nc - cap) * sizeof(struct pat);
      cap = nc;
    }
    char *t = malloc(n + 1);
    if (!t) goto nomem;
    memcpy(t, tmp, n);
    t[n] = 0;
    f.pats[f.npats++] = (struct pat){.text = t, .len = n, .flags = flags};
    bytes += n + 1;
  }
  free(tmp);
  f.bytes = bytes;
  ig->used += bytes;
  ig->npatterns += f.npats;
  ig->frames[ig->nframes++] = f;
  return 0;
too_big:
  *why = 1;
  goto fail;
nomem:
  *why = 2;
fail:
  free(tmp);
  frame_free(&f);
  return -1;
}

/* ---- matching ---- */

/* A POSIX class name [:name:] → does c belong to it? -1 for an unknown name. */
static int in_class(const char *name, size_t n, unsigned char c) {
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
  int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), digit = c >= '0' && c <= '9';
  if (IS("alpha")) return alpha;
  if (IS("digit")) return digit;
  if (IS("alnum")) return alpha || digit;
  if (IS("lower")) return c >= 'a' && c <= 'z';
  if (IS("upper")) return c >= 'A' && c <= 'Z';
  if (IS("space")) return c == ' ' || (c >= '\t' && c <= '\r');
  if (IS("blank")) return c == ' ' || c == '\t';
  if (IS("xdigit")) return digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  if (IS("cntrl")) return c < 32 || c == 127;
  if (IS("print")) return c >= 32 && c < 127;
  if (IS("graph")) return c > 32 && c < 127;
  if (IS("punct")) return c > 32 && c < 127 && !alpha && !digit;
  return -1;
#undef IS
}

/* A bracket expression at p[0] == '['. → bytes of pattern it spans (0: not a valid expression,
 * then '[' is literal); *hit: c is in the set. */
static size_t bracket(const char *p, size_t pl, unsigned char c, int *hit) {
  size_t i = 1;
  int neg = 0, in = 0;
  if (i < pl && (p[i] == '!' || p[i] == '^')) {
    neg = 1;
    i++;
  }
  size_t first = i;
  while (i < pl) {
    if (p[i] == ']' && i > first) {
      *hit = in != neg;
      return i + 1;
    }
    if (p[i] == '[' && i + 1 < pl && p[i + 1] == ':') {
      const char *end = NULL;
      for (size_t k = i + 2; k + 1 < pl; k++)
        if (p[k] == ':' && p[k + 1] == ']') {
          end = p + k;
          break;
        }
      if (end) {
        int r = in_class(p + i + 2, (size_t)(end - (p + i + 2)), c);
        if (r > 0) in = 1;
        i = (size_t)(end - p) + 2;
        continue;
      }
    }
    unsigned char lo;
    if (p[i] == '\\' && i + 1 < pl) {
      lo = (unsigned char)p[i + 1];
      i += 2;
    } else {
      lo = (unsigned char)p[i];
      i++;
    }
    unsigned char hi = lo;
    if (i + 1 < pl && p[i] == '-' && p[i + 1] != ']') {
      if (p[i + 1] == '\\' && i + 2 < pl) {
        hi = (unsigned char)p[i + 2];
        i += 3;
      } else {
        hi = (unsigned char)p[i + 1];
        i += 2;
      }
    }
    if (c >= lo && c <= hi) in = 1;
  }
  return 0;
}

/* One pattern element at p against c. → pattern bytes consumed, 0 = no match. */
static size_t one(const char *p, size_t pl, unsigned char c) {
  if (p[0] == '?') return 1;
  if (p[0] == '[') {
    int hit = 0;
    size_t n = bracket(p, pl, c, &hit);
    if (n) return hit ? n : 0;
    return c == '[' ? 1 : 0;
  }
  if (p[0] == '\\' && pl > 1) return (unsigned char)p[1] == c ? 2 : 0;
  return (unsigned char)p[0] == c ? 1 : 0;
}

/* One component glob (no '/' on either side). */
static int glob(const char *p, size_t pl, const char *s, size_t sl) {
  size_t pi = 0, si = 0, star = SIZE_MAX, mark = 0;
  while (si < sl) {
    if (pi < pl && p[pi] == '*') {
      while (pi < pl && p[pi] == '*') pi++;
      star = pi;
      mark = si;
      continue;
    }
    size_t n = pi < pl ? one(p + pi, pl - pi, (unsigned char)s[si]) : 0;
    if (n) {
      pi += n;
      si++;
      continue;
    }
    if (star == SIZE_MAX) return 0;
    pi = star;
    si = ++mark;
  }
  while (pi < pl && p[pi] == '*') pi++;
  return pi == pl;
}

static size_t comp_end(const char *s, size_t len, size_t i) {
  const char *slash = memchr(s + i, '/', len - i);
  return slash ? (size_t)(slash - s) : len;
}

/* A normalized pattern against a relative path, component by component, "**" as the star. */
static int match_components(const char *p, size_t pl, const char *s, size_t sl) {
  size_t pi = 0, si = 0, star = SIZE_MAX, mark = 0;
  while (si < sl) {
    size_t pe = pi < pl ? comp_end(p, pl, pi) : pl;
    if (pi < pl && pe - pi == 2 && p[pi] == '*' && p[pi + 1] == '*') {
      pi = pe < pl ? pe + 1 : pl;
      star = pi;
      mark = si;
      continue;
    }
    size_t se = comp_end(s, sl, si);
    if (pi < pl && glob(p + pi, pe - pi, s + si, se - si)) {
      pi = pe < pl ? pe + 1 : pl;
      si = se < sl ? se + 1 : sl;
      continue;
    }
    if (star == SIZE_MAX) return 0;
    pi = star;
    size_t me = comp_end(s, sl, mark);
    mark = me < sl ? me + 1 : sl;
    si = mark;
  }
  while (pi < pl) {
    size_t pe = comp_end(p, pl, pi);
    if (!(pe - pi == 2 && p[pi] == '*' && p[pi + 1] == '*')) return 0;
    pi = pe < pl ? pe + 1 : pl;
  }
  return 1;
}

/* → 1 excluded, 0 re-included, -1 no pattern of the frame matches. */
static int frame_decides(const struct frame *f, const char *path, size_t len, int is_dir) {
  const char *rel = path;
  size_t rl = len;
  if (f->blen) {
    if (len <= f->blen || memcmp(path, f->base, f->blen) != 0 || path[f->blen] != '/') return -1;
    rel = path + f->blen + 1;
    rl = len - f->blen - 1;
  }
  for (size_t i = f->npats; i-- > 0;) {
    const struct pat *pt = &f->pats[i];
    if ((pt->flags & PAT_DIRONLY) && !is_dir) continue;
    if (match_components(pt->text, pt->len, rel, rl)) return (pt->flags & PAT_NEGATE) ? 0 : 1;
  }
  return -1;
}

int mb_ignore_match(const mb_ignore *ig, const char *path, size_t len, int is_dir) {
  if (len == 0) return 0;
  for (size_t i = ig->nframes; i-- > 0;) {
    if (ig->frames[i].kind != MB_IGNORE_CALLER) continue;
    int r = frame_decides(&ig->frames[i], path, len, is_dir);
    if (r == 1) return 1;
    if (r == 0) break;
  }
  for (size_t i = ig->nframes; i-- > 0;) {
    if (ig->frames[i].kind != MB_IGNORE_FILE) continue;
    int r = frame_decides(&ig->frames[i], path, len, is_dir);
    if (r >= 0) return r;
  }
  return 0;
}
