/* file.h — reading a whole small input file (config.json, tokenizer files,
 * a chat template, a safetensors index) safely.
 *
 * Model directories come from users: a name there may be a FIFO (an open
 * for reading would block forever), a directory (which stdio "opens" and
 * then fails to read as garbage JSON), a device, or a file far larger than
 * any config.  The file is opened without blocking, must be a regular file,
 * and is read whole up to a cap, so each of those is an error that names
 * the path and what it is.
 */
#ifndef NL_COMMON_FILE_H
#define NL_COMMON_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"

/* The largest input file read whole: tokenizer.json files run to ~10 MiB. */
#define NL_FILE_MAX_BYTES ((size_t)256 << 20)

/* Reads path into a NUL-terminated buffer *out (*len bytes, not counting
 * the NUL; free() it).  A missing file is NL_ERR_IO, or NL_OK with *out
 * NULL when !required. */
nl_status nl_file_read(const char *path, bool required, char **out, size_t *len);

/* Reads and parses a JSON file whose top level must be an object: *out is
 * the caller's reference (json_decref it), or NULL for a missing file when
 * !required.  Parse errors name the path, line and column. */
typedef struct json_t json_t;
nl_status nl_file_read_json(const char *path, bool required, json_t **out);
/* The same with jansson decoding flags (JSON_DECODE_INT_AS_REAL for a file
 * whose integers may not fit 64 bits). */
nl_status nl_file_read_json_ex(const char *path, bool required, size_t flags, json_t **out);

#endif
