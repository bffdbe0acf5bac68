/* connect_request.c — see connect_request.h. */
#include "connect_request.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "connect.h"

bool creq_is_streaming(const char *ct) {
  if (!ct) return false;
  size_t n = strlen("application/connect+json");
  return strncasecmp(ct, "application/connect+json", n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

json_t *creq_parse(const uint8_t *b, size_t len, bool streaming, char *err, size_t errlen) {
  if (len > CREQ_MAX) { snprintf(err, errlen, "request is larger than %u bytes", CREQ_MAX); return NULL; }
  if (streaming) {
    if (len < MB_ENVELOPE_HDR) { snprintf(err, errlen, "request envelope is truncated (%zu bytes)", len); return NULL; }
    if (b[0] & MB_ENVELOPE_COMPRESSED) { snprintf(err, errlen, "compressed envelopes are not supported"); return NULL; }
    if (b[0] != 0) { snprintf(err, errlen, "request envelope has flags 0x%02x: it must be one data envelope", b[0]); return NULL; }
    uint32_t n = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (n != len - MB_ENVELOPE_HDR) {
      snprintf(err, errlen, "request must be exactly one data envelope (length %u, %zu bytes follow)", n, len - MB_ENVELOPE_HDR);
      return NULL;
    }
    b += MB_ENVELOPE_HDR;
    len = n;
  }
  if (len == 0) return json_object();
  json_error_t je;
  json_t *j = json_loadb((const char *)b, len, JSON_REJECT_DUPLICATES, &je);
  if (!j) { snprintf(err, errlen, "malformed JSON request: %s (line %d, column %d)", je.text, je.line, je.column); return NULL; }
  if (!json_is_object(j)) { json_decref(j); snprintf(err, errlen, "request message must be a JSON object"); return NULL; }
  return j;
}
