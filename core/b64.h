/* b64.h — base64 and SHA-256 through OpenSSL, plus E2B's v1 URL signature. */
#ifndef MB_B64_H
#define MB_B64_H
#include <stddef.h>
#include <stdint.h>

/* Exact encoded length of n bytes (padded); 0 if it would overflow size_t. */
size_t mb_b64_encoded_len(size_t n);
/* Upper bound of the decoded length of n base64 characters. */
size_t mb_b64_decoded_max(size_t n);

/* Standard alphabet with padding. dst must hold mb_b64_encoded_len(n) + 1 bytes (a NUL is
 * written). Returns the encoded length. */
size_t mb_b64_encode(const void *src, size_t n, char *dst);

/* Strict canonical decode: standard alphabet, length a multiple of 4, '=' only as final padding,
 * unused bits zero, no whitespace. Writes at most dst_cap bytes.
 * Returns MB_OK, MB_E_INVALID (message in *why if non-NULL) or MB_E_TOO_LARGE. */
int mb_b64_decode(const char *src, size_t n, void *dst, size_t dst_cap, size_t *out_len,
                  const char **why);

/* Tolerant decode for protobuf-JSON `bytes`: standard or URL-safe alphabet, padded or not. */
int mb_b64_decode_tolerant(const char *src, size_t n, void *dst, size_t dst_cap, size_t *out_len,
                           const char **why);

#define MB_SHA256_LEN 32
void mb_sha256(const void *data, size_t n, unsigned char out[MB_SHA256_LEN]);
void mb_sha256_hex(const void *data, size_t n, char out[2 * MB_SHA256_LEN + 1]);

/* "v1_" + base64(sha256(path:op:user:token[:exp])) without '='; exp 0 = no expiration.
 * out must hold MB_SIGN_V1_LEN + 1 bytes. Returns MB_OK or MB_E_INVALID (NULL argument). */
#define MB_SIGN_V1_LEN 46
int mb_sign_v1(const char *path, const char *op, const char *user, const char *token,
               int64_t exp, char out[MB_SIGN_V1_LEN + 1]);
#endif
