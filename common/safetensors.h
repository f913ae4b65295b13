/* safetensors.h — validated, mmapped reading of a model's weights.
 *
 * Opens DIR/model.safetensors, or every shard named by
 * DIR/model.safetensors.index.json.  Each file is mmapped read-only; its
 * JSON header is parsed and every tensor's dtype, shape, offsets and length
 * are checked (overflow-safe) against the file size before any pointer is
 * handed out.  Errors name the file and the tensor.
 */
#ifndef NL_COMMON_SAFETENSORS_H
#define NL_COMMON_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"

#define ST_MAX_DIMS 4

typedef struct st_tensor {
    const char *name;
    nl_dtype dtype;              /* F32, F16 or BF16                       */
    int32_t n_dims;
    int64_t shape[ST_MAX_DIMS];
    const void *data;            /* into the mmapped file                  */
    size_t nbytes;
    const char *file;            /* the shard it lives in                  */
} st_tensor;

typedef struct st_model st_model;

nl_status st_open(const char *model_dir, st_model **out);
/* One file, for tests and tools. */
nl_status st_open_file(const char *path, st_model **out);
void st_close(st_model *m);

size_t st_count(const st_model *m);
const st_tensor *st_get(const st_model *m, size_t i);
/* NULL when absent. */
const st_tensor *st_find(const st_model *m, const char *name);

#endif
