/* moonbox_protocol.h — the protocol constants shared by the host (core/), the in-sandbox wrapper
 * (core/wrapper/, built with musl: this header needs nothing but the preprocessor) and Lua
 * (exported as core.limits). Defined once, here. */
#ifndef MOONBOX_PROTOCOL_H
#define MOONBOX_PROTOCOL_H

/* mbwrap frames (core/wrapper/PROTOCOL.md): raw bytes per o/e data frame, and the longest data
 * frame line ('o'/'e' + base64 of MB_FRAME_DATA_MAX bytes, '\n' excluded). */
#define MB_FRAME_DATA_MAX 24576
#define MB_FRAME_LINE_MIN_LIMIT (1 + 4 * ((MB_FRAME_DATA_MAX + 2) / 3))
/* The host's default line limit: every data frame plus room for control frames. */
#define MB_FRAME_LINE_DEFAULT 40000

/* The largest Connect message of a process stream the host accepts by default. */
#define MB_PROC_MAX_MESSAGE (4 * 1024 * 1024)
/* Batch stdin up to this size travels on mbwrap's command line (`-i BASE64`): one base64
 * argument must stay below the kernel's MAX_ARG_STRLEN (128 KiB). */
#define MB_STDIN_ARG_MAX (64 * 1024)
#endif
