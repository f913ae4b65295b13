/* demo_model.c — finds or generates the built-in demo model in the cache.
 *
 * Owns where the demo lives and when it is (re)generated; what it contains
 * is the "tiny" preset of mkmodel.c plus the Qwen3 tokenizer files.
 */
#include "leader/modelgen/demo_model.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "leader/modelgen/mkmodel.h"

static const char *const demo_files[] = {
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
    "tokenizer_config.json", NULL,
};

static bool has_files(const char *dir, const char *const *files)
{
    char path[4096];
    for (const char *const *f = files; *f; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, *f);
        struct stat sb;
        if (stat(path, &sb) || !S_ISREG(sb.st_mode) || sb.st_size == 0) return false;
    }
    return true;
}

static nl_status cache_home(char *out, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0]) n = snprintf(out, cap, "%s", xdg);
    else if (home && home[0]) n = snprintf(out, cap, "%s/.cache", home);
    else
        return nl_error(NL_ERR_NOT_FOUND, "demo model: neither XDG_CACHE_HOME nor HOME is set, "
                        "so there is no cache folder to keep it in");
    if (n < 0 || (size_t)n >= cap) return nl_error(NL_ERR_INVALID_ARG, "demo model: cache path too long");
    return NL_OK;
}

/* mkdir -p, for the cache folders only. */
static nl_status make_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST)
            return nl_error(NL_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
        *p = c;
        if (!c) break;
    }
    return NL_OK;
}

nl_status demo_model_tokenizer_dir(char *dir, size_t cap)
{
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    int n;
    if (env && env[0]) {
        n = snprintf(dir, cap, "%s", env);
    } else {
        char cache[4096];
        NL_TRY(cache_home(cache, sizeof cache));
        n = snprintf(dir, cap, "%s/nanollm/tokenizer-qwen3", cache);
    }
    if (n < 0 || (size_t)n >= cap)
        return nl_error(NL_ERR_INVALID_ARG, "demo model: tokenizer path too long (%zu bytes at most)", cap - 1);
    return NL_OK;
}

nl_status demo_model_ensure(char *dir, size_t cap)
{
    char cache[4096], root[4200], model[4300], tok[4300];
    NL_TRY(cache_home(cache, sizeof cache));
    snprintf(root, sizeof root, "%s/nanollm", cache);
    snprintf(model, sizeof model, "%s/%s", root, DEMO_MODEL_NAME);
    if (strlen(model) >= cap)
        return nl_error(NL_ERR_INVALID_ARG, "demo model: path %s does not fit in %zu bytes", model,
                        cap);

    struct stat sb;
    if (stat(model, &sb) == 0) {
        /* Written by an atomic rename, so an incomplete one was made by hand. */
        if (!has_files(model, demo_files))
            return nl_error(NL_ERR_FORMAT, "demo model: %s exists but is incomplete; remove it "
                            "to have it generated again", model);
        snprintf(dir, cap, "%s", model);
        return NL_OK;
    }

    NL_TRY(demo_model_tokenizer_dir(tok, sizeof tok));
    static const char *const tok_files[] = {"tokenizer.json", "tokenizer_config.json", NULL};
    if (!has_files(tok, tok_files))
        return nl_error(NL_ERR_NOT_FOUND, "demo model: the Qwen3 tokenizer is not in %s "
                        "(tokenizer.json, tokenizer_config.json); run tools/fetch-tokenizer.sh "
                        "or set NANOLLM_TOKENIZER_DIR", tok);

    NL_TRY(make_dirs(root));
    nl_model_config cfg;
    NL_TRY(mkmodel_preset("tiny", &cfg));
    mkmodel_options opt = {.seed = DEMO_MODEL_SEED, .tokenizer_dir = tok};
    nl_status st = mkmodel_write(&cfg, &opt, model);
    /* Losing the race to another process is success: its copy is complete. */
    if (st && !has_files(model, demo_files)) return st;
    snprintf(dir, cap, "%s", model);
    return NL_OK;
}
