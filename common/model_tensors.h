/* model_tensors.h — the tensors a checkpoint of a config must hold.
 *
 * The family's tensor table (model_family.h) expanded over the config's
 * layers: one list serves the loader (check a checkpoint: missing,
 * unexpected and mis-shaped tensors reported by name) and the model writer
 * (write exactly these tensors).
 */
#ifndef NL_COMMON_MODEL_TENSORS_H
#define NL_COMMON_MODEL_TENSORS_H

#include "common/model_config.h"
#include "common/model_family.h"
#include "common/safetensors.h"

typedef struct model_tensor_spec {
    char name[96];
    int32_t n_dims;
    int64_t shape[2];
    model_tensor_kind kind;
    const model_tensor_def *def; /* the table row it expands              */
    int32_t layer;               /* -1 for a model-wide tensor            */
} model_tensor_spec;

/* Fills *specs (malloc'd, caller frees) with every tensor of cfg, in the
 * family table's (checkpoint) order, per-layer rows repeated per layer. */
nl_status model_tensors_list(const nl_model_config *cfg, model_tensor_spec **specs,
                             size_t *n);

/* Checks that m holds exactly the tensors of cfg with the right shapes and
 * a supported dtype; the error lists missing / unexpected names. */
nl_status model_tensors_check(const nl_model_config *cfg, const st_model *m);

#endif
